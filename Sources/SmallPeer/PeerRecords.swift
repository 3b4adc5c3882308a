// The payloads of the small peer's records (framing: RecordFile.swift; layout: docs/SMALLPEER.md).
// Canonical CBOR maps with one-letter keys:
//
//   header = { "g": generation, "s": site id, "t": "h", "v": 1 }          ; first record of each file
//   commit = { "c": HLC high-water mark (uint), "t": "c",
//              ? "d": [* [collection, _id, op, bytes / null]],   ; op 0 merge delta, 1 replace state, 2 evict
//              ? "k": [* [subscription key, checkpoint txn]],
//              ? "o": [* [collection, _id, base / null]],         ; outbox: base version vector, null = clean
//              ? "s": next upload sequence number }
//   end    = { "n": number of commit records before it, "t": "e" }        ; last record of a snapshot
//   base   = [* [site, timestamp]]

import CRDT
import SyncProtocol
import Values

/// One atomic change of the local store: everything one `execute` or one applied sync message did.
struct Commit: Sendable {
    enum DocumentOp: Sendable {
        /// Merge this delta (a local write, or a change from the server).
        case merge(Delta)
        /// Take this state as the document (snapshots; full states from the server for new documents).
        case replace(Document)
        /// Drop the local copy without a tombstone.
        case evict
    }

    var clock: UInt64
    var documents: [(ref: DocumentRef, op: DocumentOp)] = []
    var outbox: [(ref: DocumentRef, base: VersionVector?)] = []
    var checkpoints: [(key: String, txn: Int64)] = []
    var nextUploadSeq: UInt64?

    var isEmpty: Bool { documents.isEmpty && outbox.isEmpty && checkpoints.isEmpty && nextUploadSeq == nil }
}

struct FileHeader: Sendable, Equatable {
    static let formatVersion: UInt64 = 1
    var site: UInt64
    var generation: UInt64
}

enum PeerRecord: Sendable {
    case header(FileHeader)
    case commit(Commit)
    case end(count: UInt64)
}

/// A whole record whose content is not what this version writes.
struct RecordDecodeError: Error, CustomStringConvertible {
    var reason: String
    var description: String { reason }
}

enum PeerRecordCodec {
    /// Limits for reading records back: CRDT states may be large, nesting follows the CRDT codec.
    static let limits = CBORLimits(maxInputBytes: RecordFraming.maxRecordBytes, maxDepth: 200,
                                   maxStringBytes: RecordFraming.maxRecordBytes, maxContainerCount: 1 << 24, requireCanonical: false)

    static func encode(_ header: FileHeader) -> [UInt8] {
        var w = CBORWriter()
        w.mapHeader(4)
        w.text("g"); w.unsigned(header.generation)
        w.text("s"); w.unsigned(header.site)
        w.text("t"); w.text("h")
        w.text("v"); w.unsigned(FileHeader.formatVersion)
        return w.bytes
    }

    static func encodeEnd(count: UInt64) -> [UInt8] {
        var w = CBORWriter()
        w.mapHeader(2)
        w.text("n"); w.unsigned(count)
        w.text("t"); w.text("e")
        return w.bytes
    }

    static func encode(_ c: Commit) -> [UInt8] {
        var w = CBORWriter(capacity: 256)
        w.mapHeader(2 + (c.documents.isEmpty ? 0 : 1) + (c.checkpoints.isEmpty ? 0 : 1) + (c.outbox.isEmpty ? 0 : 1) + (c.nextUploadSeq == nil ? 0 : 1))
        w.text("c"); w.unsigned(c.clock)
        if !c.documents.isEmpty {
            w.text("d")
            w.arrayHeader(c.documents.count)
            for (ref, op) in c.documents {
                w.arrayHeader(4)
                w.text(ref.collection)
                w.value(ref.id)
                switch op {
                case .merge(let d): w.unsigned(0); w.byteString(d.encode())
                case .replace(let doc): w.unsigned(1); w.byteString(doc.encode())
                case .evict: w.unsigned(2); w.null()
                }
            }
        }
        if !c.checkpoints.isEmpty {
            w.text("k")
            w.arrayHeader(c.checkpoints.count)
            for (key, txn) in c.checkpoints { w.arrayHeader(2); w.text(key); w.int(txn) }
        }
        if !c.outbox.isEmpty {
            w.text("o")
            w.arrayHeader(c.outbox.count)
            for (ref, base) in c.outbox {
                w.arrayHeader(3)
                w.text(ref.collection)
                w.value(ref.id)
                if let base { encode(base, into: &w) } else { w.null() }
            }
        }
        if let s = c.nextUploadSeq { w.text("s"); w.unsigned(s) }
        w.text("t"); w.text("c")
        return w.bytes
    }

    static func encode(_ vv: VersionVector, into w: inout CBORWriter) {
        let entries = vv.entries.sorted { $0.key < $1.key }
        w.arrayHeader(entries.count)
        for (site, t) in entries { w.arrayHeader(2); w.unsigned(site.rawValue); w.unsigned(t.rawValue) }
    }

    static func decode(_ payload: ArraySlice<UInt8>) throws -> PeerRecord {
        var r = try CBORReader(Array(payload), limits: limits)
        let n = try r.mapHeader()
        var type = ""
        var header = FileHeader(site: 0, generation: 0)
        var version: UInt64 = 0
        var commit = Commit(clock: 0)
        var count: UInt64 = 0
        for _ in 0..<n {
            switch try r.text() {
            case "t": type = try r.text()
            case "v": version = try r.unsigned()
            case "s":
                // "s" is the site in a header and the upload sequence in a commit; "t" sorts last,
                // so the meaning is fixed after the loop.
                let v = try r.unsigned()
                header.site = v
                commit.nextUploadSeq = v
            case "g": header.generation = try r.unsigned()
            case "n": count = try r.unsigned()
            case "c": commit.clock = try r.unsigned()
            case "d":
                for _ in 0..<(try r.arrayHeader()) {
                    try r.arrayHeader(count: 4)
                    let ref = DocumentRef(collection: try r.text(), id: try r.value())
                    switch try r.unsigned() {
                    case 0:
                        let bytes = try r.byteString()
                        commit.documents.append((ref, .merge(try crdt { () throws(CRDTError) in try Delta.decode(bytes) })))
                    case 1:
                        let bytes = try r.byteString()
                        commit.documents.append((ref, .replace(try crdt { () throws(CRDTError) in try Document.decode(bytes) })))
                    case 2: try r.null(); commit.documents.append((ref, .evict))
                    default: throw RecordDecodeError(reason: "unknown document operation")
                    }
                }
            case "k":
                for _ in 0..<(try r.arrayHeader()) {
                    try r.arrayHeader(count: 2)
                    commit.checkpoints.append((try r.text(), try r.int()))
                }
            case "o":
                for _ in 0..<(try r.arrayHeader()) {
                    try r.arrayHeader(count: 3)
                    let ref = DocumentRef(collection: try r.text(), id: try r.value())
                    commit.outbox.append((ref, r.skipNull() ? nil : try decodeVersionVector(&r)))
                }
            default:
                throw RecordDecodeError(reason: "unknown record key")
            }
        }
        try r.expectEnd()
        switch type {
        case "h":
            guard version == FileHeader.formatVersion else { throw RecordDecodeError(reason: "format version \(version) is not supported") }
            return .header(header)
        case "c": return .commit(commit)
        case "e": return .end(count: count)
        default: throw RecordDecodeError(reason: "unknown record type")
        }
    }

    static func decodeVersionVector(_ r: inout CBORReader) throws(CBORError) -> VersionVector {
        var entries: [SiteID: HLCTimestamp] = [:]
        for _ in 0..<(try r.arrayHeader()) {
            try r.arrayHeader(count: 2)
            entries[SiteID(try r.unsigned())] = HLCTimestamp(rawValue: try r.unsigned())
        }
        return VersionVector(entries)
    }

    /// CRDT decoding errors inside a record surface as CBOR errors (the record is unreadable either way).
    static func crdt<T>(_ body: () throws(CRDTError) -> T) throws -> T {
        do { return try body() } catch { throw RecordDecodeError(reason: "CRDT payload: \(error)") }
    }
}
