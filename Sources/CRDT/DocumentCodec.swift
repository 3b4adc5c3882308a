// Versioned, deterministic encodings of a document's state and of deltas (canonical CBOR).
//
//   state = [ 1,                       format version
//             0,                       kind: state
//             _id,                     Value (text or map)
//             [* site: uint],          site table, ascending, unique
//             [* [si, ts: uint]],      version vector, by site index ascending
//             [* [si, ts: uint]],      reaped version vector, same shape
//             root ]                   slot (SlotCodec.swift); metas' `off` are relative to the version vector
//
//   delta = [ 1,                       format version
//             1 / 2,                   kind: incremental / reset
//             [* site: uint],          site table
//             [* [si, to: uint, fromOff: uint / null]],  ranges (from = to - fromOff; null: from the start)
//             [* [si, ts: uint]],      reaped version vector (reset deltas only, else empty)
//             root ]                   sparse slot tree; `off` relative to each site's `to`
//
// Replicas that have seen the same events hold byte-identical encodings (all orders are fixed:
// sites ascending, map keys in RFC 8949 §4.2.1 order, shortest integers and floats).

import Values

extension CBORLimits {
    /// Limits for CRDT states and deltas: documents are capped at 5 MiB of JSON, so 32 MiB of
    /// encoded state is far beyond anything legitimate; nesting covers 64 MAP levels plus values.
    public static let crdt = CBORLimits(maxInputBytes: 32 << 20, maxDepth: 160, maxStringBytes: 8 << 20,
                                        maxContainerCount: 1 << 22, requireCanonical: true)
}

extension Document {
    public static let encodingVersion: UInt64 = 1

    public func encode() -> [UInt8] {
        var sites = Set(versionVector.sites).union(reapedVersionVector.sites)
        SiteTable.collectSites(root, into: &sites)
        let table = SiteTable(sites: sites, reference: versionVector.entries)
        var w = CBORWriter(capacity: 256)
        w.arrayHeader(7)
        w.unsigned(Self.encodingVersion)
        w.unsigned(0)
        w.value(id)
        w.arrayHeader(table.sites.count)
        for s in table.sites { w.unsigned(s.rawValue) }
        writeVector(versionVector, table, &w)
        writeVector(reapedVersionVector, table, &w)
        SlotCodec.write(root, table, &w)
        return w.bytes
    }

    public static func decode(_ bytes: [UInt8], limits: CBORLimits = .crdt) throws(CRDTError) -> Document {
        do {
            var r = try CBORReader(bytes, limits: limits)
            try r.arrayHeader(count: 7)
            let version = try r.unsigned()
            guard version == encodingVersion else { throw CRDTError.unsupportedVersion(version) }
            let kindOffset = r.position
            guard try r.unsigned() == 0 else { throw CBORError.invalidValue(offset: kindOffset, reason: "not a document state") }
            let idOffset = r.position
            let id = try r.value()
            switch id {
            case .string, .object: break
            default: throw CBORError.invalidValue(offset: idOffset, reason: "_id must be text or a map")
            }
            return try finishDecode(&r, id: id)
        } catch let e as CBORError {
            throw .decoding(e)
        } catch let e as CRDTError {
            throw e
        } catch {
            throw .malformed("\(error)")
        }
    }

    private static func finishDecode(_ r: inout CBORReader, id: Value) throws -> Document {
        let sites = try readSites(&r)
        var table = SiteTable(sites: Set(sites), reference: [:])
        let vv = try readVector(&r, table)
        let reaped = try readVector(&r, table)
        table.reference = vv.entries
        var root = try SlotCodec.read(&r, table, isRoot: true)
        try r.expectEnd()
        normalize(&root, barrier: nil)
        var doc = try Document(id: id)
        doc.root = root
        doc.versionVector = vv
        doc.reapedVersionVector = reaped
        doc.recent.forget(versionVector: vv)
        var stamp: UInt64 = 0
        root.forEachMeta { stamp = max(stamp, $0.stamp) }
        doc.maxStamp = stamp
        return doc
    }
}

extension Delta {
    public func encode() -> [UInt8] {
        var sites = Set(ranges.keys).union(reaped.sites)
        SiteTable.collectSites(root, into: &sites)
        let table = SiteTable(sites: sites, reference: ranges.mapValues(\.to))
        var w = CBORWriter(capacity: 64)
        w.arrayHeader(6)
        w.unsigned(Document.encodingVersion)
        w.unsigned(kind.rawValue)
        w.arrayHeader(table.sites.count)
        for s in table.sites { w.unsigned(s.rawValue) }
        w.arrayHeader(ranges.count)
        for s in ranges.keys.sorted() {
            guard let range = ranges[s] else { continue }
            w.arrayHeader(3)
            w.unsigned(table.idx(s))
            w.unsigned(range.to.rawValue)
            if let f = range.from { w.unsigned(range.to.rawValue - f.rawValue) } else { w.null() }
        }
        writeVector(reaped, table, &w)
        SlotCodec.write(root, table, &w)
        return w.bytes
    }

    public static func decode(_ bytes: [UInt8], limits: CBORLimits = .crdt) throws(CRDTError) -> Delta {
        do {
            var r = try CBORReader(bytes, limits: limits)
            try r.arrayHeader(count: 6)
            let version = try r.unsigned()
            guard version == Document.encodingVersion else { throw CRDTError.unsupportedVersion(version) }
            let kindOffset = r.position
            guard let kind = Kind(rawValue: try r.unsigned()) else {
                throw CBORError.invalidValue(offset: kindOffset, reason: "unknown delta kind")
            }
            let sites = try readSites(&r)
            var table = SiteTable(sites: Set(sites), reference: [:])
            var ranges: [SiteID: DeltaRange] = [:]
            let n = try r.arrayHeader()
            var last: SiteID? = nil
            for _ in 0..<n {
                let o = r.position
                try r.arrayHeader(count: 3)
                let s = try SlotCodec.site(&r, table)
                guard last.map({ s > $0 }) ?? true else { throw CBORError.duplicateOrUnsortedKey(offset: o) }
                last = s
                let to = try r.unsigned(max: SlotCodec.maxTimestamp)
                var from: HLCTimestamp? = nil
                if !r.skipNull() {
                    let off = try r.unsigned(max: to)
                    guard off > 0 else { throw CBORError.invalidValue(offset: o, reason: "empty range") }
                    from = HLCTimestamp(rawValue: to - off)
                }
                if kind == .reset && from != nil { throw CBORError.invalidValue(offset: o, reason: "reset ranges start at the beginning") }
                ranges[s] = DeltaRange(from: from, to: HLCTimestamp(rawValue: to))
            }
            let reaped = try readVector(&r, table)
            table.reference = ranges.mapValues(\.to)
            table.floor = ranges.compactMapValues(\.from)
            var root = try SlotCodec.read(&r, table, isRoot: true)
            try r.expectEnd()
            Document.normalize(&root, barrier: nil)
            return Delta(kind: kind, ranges: ranges, reaped: reaped, root: root)
        } catch let e as CBORError {
            throw .decoding(e)
        } catch let e as CRDTError {
            throw e
        } catch {
            throw .malformed("\(error)")
        }
    }
}

private func writeVector(_ vv: VersionVector, _ t: SiteTable, _ w: inout CBORWriter) {
    w.arrayHeader(vv.sorted.count)
    for e in vv.sorted {
        w.arrayHeader(2)
        w.unsigned(t.idx(e.site))
        w.unsigned(e.timestamp.rawValue)
    }
}

private func readSites(_ r: inout CBORReader) throws(CBORError) -> [SiteID] {
    let n = try r.arrayHeader()
    var sites: [SiteID] = []
    sites.reserveCapacity(n)
    for _ in 0..<n {
        let o = r.position
        let s = SiteID(try r.unsigned())
        if let last = sites.last, s <= last { throw .duplicateOrUnsortedKey(offset: o) }
        sites.append(s)
    }
    return sites
}

private func readVector(_ r: inout CBORReader, _ t: SiteTable) throws(CBORError) -> VersionVector {
    let n = try r.arrayHeader()
    var vv = VersionVector()
    var last: SiteID? = nil
    for _ in 0..<n {
        let o = r.position
        try r.arrayHeader(count: 2)
        let s = try SlotCodec.site(&r, t)
        guard last.map({ s > $0 }) ?? true else { throw .duplicateOrUnsortedKey(offset: o) }
        last = s
        vv[s] = HLCTimestamp(rawValue: try r.unsigned(max: SlotCodec.maxTimestamp))
    }
    return vv
}
