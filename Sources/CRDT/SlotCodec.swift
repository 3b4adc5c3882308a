// Canonical CBOR encoding of the slot tree, shared by document state and deltas.
//
//   slot      = map { ? 0: register, ? 1: marker, ? 2: counter, ? 3: removal, ? 4: children }
//               (uint keys ascending; an empty slot is never written, except an empty root)
//   meta      = si, off, sd            three integers inlined in the enclosing array:
//                 si  index into the site table (sites sorted ascending)
//                 off reference[site] - dot, where reference is the version vector (state) or
//                     the range's `to` (delta): usually 0 or small
//                 sd  stamp - dot (signed): 0 for ordinary writes, -dot for INITIAL writes
//   register  = [meta]                                   payload dropped (kept only as a barrier)
//             | [meta, 0, value]                          REGISTER, value in canonical CBOR
//             | [meta, 1, id: text, len: uint, metadata: map]   ATTACHMENT
//   marker    = [meta]
//   counter   = [restart / null, [* [meta, total: float]]]   contributions by site ascending
//   restart   = [meta, base: float, [* [si, total: float]]]  observed totals by site ascending
//   removal   = [meta, bsi, bdot: uint, bstamp: uint]        barrier Meta in absolute form
//   children  = map { * text => slot }                        keys in RFC 8949 §4.2.1 order
//
// Floats use the shortest exact width, so the encoding is a function of the state alone.

import Values

/// Sites of one encoded state or delta and, per site, the reference dot for `off` (and, in deltas,
/// the exclusive lower bound every dot must exceed).
struct SiteTable {
    var sites: [SiteID]
    var index: [SiteID: Int]
    var reference: [SiteID: HLCTimestamp]
    var floor: [SiteID: HLCTimestamp] = [:]

    init(sites: Set<SiteID>, reference: [SiteID: HLCTimestamp]) {
        self.sites = sites.sorted()
        var index: [SiteID: Int] = [:]
        for (i, s) in self.sites.enumerated() { index[s] = i }
        self.index = index
        self.reference = reference
    }

    func idx(_ s: SiteID) -> UInt64 { UInt64(index[s] ?? 0) }

    /// Every site a slot tree mentions.
    static func collectSites(_ slot: Slot, into set: inout Set<SiteID>) {
        slot.forEachOwnMeta { set.insert($0.site) }
        if let r = slot.counter?.restart { for s in r.observed.keys { set.insert(s) } }
        slot.children.forEachChild { _, child in
            switch child {
            case .register(_, let m): set.insert(m.site)
            case .slot(let s): collectSites(s, into: &set)
            }
        }
    }
}

enum SlotCodec {
    static func writeMeta(_ m: Meta, _ t: SiteTable, _ w: inout CBORWriter) {
        w.unsigned(t.idx(m.site))
        let ref = t.reference[m.site] ?? m.dot
        w.unsigned(ref.rawValue &- m.dot.rawValue)
        w.int(Int64(bitPattern: m.stamp &- m.dot.rawValue))
    }

    static func write(_ slot: Slot, _ t: SiteTable, _ w: inout CBORWriter) {
        let e = slot.extras
        let count = (slot.register != nil ? 1 : 0) + (e.marker != nil ? 1 : 0) + (e.counter != nil ? 1 : 0)
            + (e.removal != nil ? 1 : 0) + (slot.children.isEmpty ? 0 : 1)
        w.mapHeader(count)
        if let r = slot.register {
            w.unsigned(0)
            switch r.payload {
            case nil:
                w.arrayHeader(3)
                writeMeta(r.meta, t, &w)
            case .value(let v)?:
                w.arrayHeader(5)
                writeMeta(r.meta, t, &w)
                w.unsigned(0)
                w.value(v)
            case .attachment(let a)?:
                w.arrayHeader(7)
                writeMeta(r.meta, t, &w)
                w.unsigned(1)
                w.text(a.id)
                w.unsigned(a.length)
                w.value(.object(a.metadata))
            }
        }
        if let m = e.marker {
            w.unsigned(1)
            w.arrayHeader(3)
            writeMeta(m, t, &w)
        }
        if let c = e.counter {
            w.unsigned(2)
            w.arrayHeader(2)
            if let r = c.restart {
                w.arrayHeader(5)
                writeMeta(r.meta, t, &w)
                w.double(r.base)
                w.arrayHeader(r.observed.count)
                for site in r.observed.keys.sorted() {
                    w.arrayHeader(2)
                    w.unsigned(t.idx(site))
                    w.double(r.observed[site] ?? 0)
                }
            } else {
                w.null()
            }
            w.arrayHeader(c.contributions.count)
            for site in c.contributions.keys.sorted() {
                guard let k = c.contributions[site] else { continue }
                w.arrayHeader(4)
                writeMeta(k.meta, t, &w)
                w.double(k.total)
            }
        }
        if let x = e.removal {
            w.unsigned(3)
            w.arrayHeader(6)
            writeMeta(x.meta, t, &w)
            w.unsigned(t.idx(x.barrier.site))
            w.unsigned(x.barrier.dot.rawValue)
            w.unsigned(x.barrier.stamp)
        }
        if !slot.children.isEmpty {
            w.unsigned(4)
            w.mapHeader(slot.children.count)
            slot.children.forEachChild { key, child in
                w.text(key)
                switch child {
                case .register(let v, let m):  // what write(_:_:_:) emits for a slot holding only this
                    w.mapHeader(1)
                    w.unsigned(0)
                    w.arrayHeader(5)
                    writeMeta(m, t, &w)
                    w.unsigned(0)
                    w.value(v)
                case .slot(let s):
                    write(s, t, &w)
                }
            }
        }
    }

    // MARK: decoding

    static let maxTimestamp = HLCTimestamp.max.rawValue

    static func site(_ r: inout CBORReader, _ t: SiteTable) throws(CBORError) -> SiteID {
        let offset = r.position
        let i = try r.unsigned()
        guard i < UInt64(t.sites.count) else { throw .invalidValue(offset: offset, reason: "site index out of range") }
        return t.sites[Int(i)]
    }

    static func readMeta(_ r: inout CBORReader, _ t: SiteTable) throws(CBORError) -> Meta {
        let offset = r.position
        let s = try site(&r, t)
        guard let ref = t.reference[s] else { throw .invalidValue(offset: offset, reason: "event from a site with no version") }
        let off = try r.unsigned()
        guard off <= ref.rawValue else { throw .invalidValue(offset: offset, reason: "dot before time zero") }
        let dot = HLCTimestamp(rawValue: ref.rawValue - off)
        if let f = t.floor[s], dot <= f { throw .invalidValue(offset: offset, reason: "dot outside the delta's range") }
        let sd = try r.int()
        let (stamp, overflow) = Int64(bitPattern: dot.rawValue).addingReportingOverflow(sd)
        guard !overflow, stamp >= 0 else { throw .invalidValue(offset: offset, reason: "stamp out of range") }
        return Meta(stamp: UInt64(stamp), site: s, dot: dot)
    }

    static func finite(_ r: inout CBORReader) throws(CBORError) -> Double {
        let offset = r.position
        let d = try r.double()
        guard d.isFinite else { throw .invalidValue(offset: offset, reason: "counter amounts must be finite") }
        return d
    }

    static func read(_ r: inout CBORReader, _ t: SiteTable, isRoot: Bool) throws(CBORError) -> Slot {
        let start = r.position
        let n = try r.mapHeader()
        try r.enter()
        defer { r.leave() }
        var slot = Slot()
        var lastKey: UInt64? = nil
        for _ in 0..<n {
            let keyOffset = r.position
            let key = try r.unsigned(max: 4)
            guard lastKey.map({ key > $0 }) ?? true else { throw .duplicateOrUnsortedKey(offset: keyOffset) }
            lastKey = key
            if isRoot && (key == 0 || key == 2) {
                throw .invalidValue(offset: keyOffset, reason: "the document root is always a MAP")
            }
            switch key {
            case 0: slot.register = try readRegister(&r, t)
            case 1:
                try r.arrayHeader(count: 3)
                slot.marker = try readMeta(&r, t)
            case 2: slot.counter = try readCounter(&r, t)
            case 3:
                try r.arrayHeader(count: 6)
                let meta = try readMeta(&r, t)
                let bs = try site(&r, t)
                let bdot = try r.unsigned(max: maxTimestamp)
                let bstamp = try r.unsigned(max: maxTimestamp)
                slot.removal = Removal(meta: meta, barrier: Meta(stamp: bstamp, site: bs, dot: HLCTimestamp(rawValue: bdot)))
            default:
                let count = try r.mapHeader()
                slot.children.reserveCapacity(count)  // bounded: mapHeader checked count against the input
                var previous: Range<Int>? = nil
                for _ in 0..<count {
                    let keyOffset = r.position
                    let (k, range) = try r.textWithEncodedRange()
                    if let p = previous, !r.encodedLess(p, range) { throw .duplicateOrUnsortedKey(offset: keyOffset) }
                    previous = range
                    if isRoot && k == "_id" { throw .invalidValue(offset: keyOffset, reason: "_id is not a field") }
                    if let problem = NameRules.problem(k) { throw .invalidValue(offset: keyOffset, reason: "field name \(problem)") }
                    slot.children.append(sortedKey: k, try read(&r, t, isRoot: false))
                }
                guard count > 0 else { throw .nonCanonical(offset: keyOffset, reason: "empty children map") }
            }
        }
        if slot.isEmpty && !isRoot { throw .nonCanonical(offset: start, reason: "empty slot") }
        return slot
    }

    static func readRegister(_ r: inout CBORReader, _ t: SiteTable) throws(CBORError) -> Register {
        let offset = r.position
        let count = try r.arrayHeader()
        let meta = try readMeta(&r, t)
        switch count {
        case 3:
            return Register(meta: meta, payload: nil)
        case 5:
            guard try r.unsigned() == 0 else { throw .invalidValue(offset: offset, reason: "unknown register kind") }
            let valueOffset = r.position
            let v = try r.value()
            guard Document.isFinite(v) else { throw .invalidValue(offset: valueOffset, reason: "NaN or infinity in a value") }
            return Register(meta: meta, payload: .value(v))
        case 7:
            guard try r.unsigned() == 1 else { throw .invalidValue(offset: offset, reason: "unknown register kind") }
            let id = try r.text()
            let len = try r.unsigned(max: UInt64(Int64.max))
            guard case .object(let metadata) = try r.value(), Document.isFinite(.object(metadata)) else {
                throw .invalidValue(offset: offset, reason: "attachment metadata must be a map of finite values")
            }
            return Register(meta: meta, payload: .attachment(AttachmentToken(id: id, length: len, metadata: metadata)))
        default:
            throw .unexpectedType(offset: offset, expected: "register of 3, 5 or 7 items")
        }
    }

    static func readCounter(_ r: inout CBORReader, _ t: SiteTable) throws(CBORError) -> CounterState {
        let offset = r.position
        try r.arrayHeader(count: 2)
        var c = CounterState()
        if !r.skipNull() {
            try r.arrayHeader(count: 5)
            let meta = try readMeta(&r, t)
            let base = try finite(&r)
            let n = try r.arrayHeader()
            var observed: [SiteID: Double] = [:]
            var last: SiteID? = nil
            for _ in 0..<n {
                let o = r.position
                try r.arrayHeader(count: 2)
                let s = try site(&r, t)
                guard last.map({ s > $0 }) ?? true else { throw .duplicateOrUnsortedKey(offset: o) }
                last = s
                observed[s] = try finite(&r)
            }
            c.restart = CounterRestart(meta: meta, base: base, observed: observed)
        }
        let n = try r.arrayHeader()
        var last: SiteID? = nil
        for _ in 0..<n {
            let o = r.position
            try r.arrayHeader(count: 4)
            let meta = try readMeta(&r, t)
            guard last.map({ meta.site > $0 }) ?? true else { throw .duplicateOrUnsortedKey(offset: o) }
            last = meta.site
            c.contributions[meta.site] = CounterContribution(meta: meta, total: try finite(&r))
        }
        guard c.restart != nil || !c.contributions.isEmpty else {
            throw .nonCanonical(offset: offset, reason: "empty counter")
        }
        return c
    }
}
