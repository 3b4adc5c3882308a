// The payloads of the small peer's records (framing: RecordFile.swift; layout: docs/SMALLPEER.md).
// Canonical CBOR maps with one-letter keys:
//
//   header = { "g": generation, "s": site id, "t": "h", "v": 1 }          ; first record of each file
//   commit = { "c": HLC high-water mark (uint), "t": "c",
//              ? "d": [* [collection, _id, op, bytes / null]],   ; op 0 merge delta, 1 replace state, 2 evict
//              ? "k": [* [subscription key, checkpoint txn]],     ; checkpoints of no server (older versions)
//              ? "l": [* server site],                            ; servers linked with from now on
//              ? "o": [* [collection, _id, base / null]],         ; uploads for the server not yet identified
//              ? "p": [* [server site, subscription key, checkpoint txn]],
//              ? "s": next upload sequence number,
//              ? "u": [* [server site, [collection, _id, base / null]]] }  ; uploads: base the server has, null = clean
//
// Server site 0 (never a server's, PROTOCOL.md §4.2) stands for "no server": "k" and "o" hold its
// entries, so a directory written before per-server state loads with them.
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
    /// Upload state per server site (0: the server not yet identified): the version vector the
    /// server is known to have of the document, nil once it has everything.
    var outbox: [(server: UInt64, ref: DocumentRef, base: VersionVector?)] = []
    var checkpoints: [(server: UInt64, key: String, txn: Int64)] = []
    /// Servers this peer linked with for the first time (their upload state starts here).
    var linkedServers: [UInt64] = []
    /// In memory only (not encoded): see `LocalStore.changedSinceTaken`.
    var changedWhilePending: [(server: UInt64, ref: DocumentRef)] = []
    var nextUploadSeq: UInt64?

    var isEmpty: Bool { documents.isEmpty && outbox.isEmpty && checkpoints.isEmpty && linkedServers.isEmpty && nextUploadSeq == nil }
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
        let unidentified = c.outbox.filter { $0.server == LocalStore.noServer }
        let identified = c.outbox.filter { $0.server != LocalStore.noServer }
        let oldCheckpoints = c.checkpoints.filter { $0.server == LocalStore.noServer }
        let checkpoints = c.checkpoints.filter { $0.server != LocalStore.noServer }
        let optional = [!c.documents.isEmpty, !oldCheckpoints.isEmpty, !c.linkedServers.isEmpty, !unidentified.isEmpty,
                        !checkpoints.isEmpty, c.nextUploadSeq != nil, !identified.isEmpty]
        var w = CBORWriter(capacity: 256)
        w.mapHeader(2 + optional.filter { $0 }.count)
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
        if !oldCheckpoints.isEmpty {
            w.text("k")
            w.arrayHeader(oldCheckpoints.count)
            for (_, key, txn) in oldCheckpoints { w.arrayHeader(2); w.text(key); w.int(txn) }
        }
        if !c.linkedServers.isEmpty {
            w.text("l")
            w.arrayHeader(c.linkedServers.count)
            for server in c.linkedServers { w.unsigned(server) }
        }
        if !unidentified.isEmpty {
            w.text("o")
            w.arrayHeader(unidentified.count)
            for (_, ref, base) in unidentified { encodeUpload(ref, base, into: &w) }
        }
        if !checkpoints.isEmpty {
            w.text("p")
            w.arrayHeader(checkpoints.count)
            for (server, key, txn) in checkpoints { w.arrayHeader(3); w.unsigned(server); w.text(key); w.int(txn) }
        }
        if let s = c.nextUploadSeq { w.text("s"); w.unsigned(s) }
        w.text("t"); w.text("c")
        if !identified.isEmpty {
            w.text("u")
            w.arrayHeader(identified.count)
            for (server, ref, base) in identified { w.arrayHeader(2); w.unsigned(server); encodeUpload(ref, base, into: &w) }
        }
        return w.bytes
    }

    /// `[collection, _id, base / null]`
    private static func encodeUpload(_ ref: DocumentRef, _ base: VersionVector?, into w: inout CBORWriter) {
        w.arrayHeader(3)
        w.text(ref.collection)
        w.value(ref.id)
        if let base { encode(base, into: &w) } else { w.null() }
    }

    private static func decodeUpload(_ r: inout CBORReader) throws -> (DocumentRef, VersionVector?) {
        try r.arrayHeader(count: 3)
        let ref = DocumentRef(collection: try r.text(), id: try r.value())
        return (ref, r.skipNull() ? nil : try decodeVersionVector(&r))
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
                    commit.checkpoints.append((LocalStore.noServer, try r.text(), try r.int()))
                }
            case "l":
                for _ in 0..<(try r.arrayHeader()) { commit.linkedServers.append(try r.unsigned()) }
            case "o":
                for _ in 0..<(try r.arrayHeader()) {
                    let (ref, base) = try decodeUpload(&r)
                    commit.outbox.append((LocalStore.noServer, ref, base))
                }
            case "p":
                for _ in 0..<(try r.arrayHeader()) {
                    try r.arrayHeader(count: 3)
                    commit.checkpoints.append((try r.unsigned(), try r.text(), try r.int()))
                }
            case "u":
                for _ in 0..<(try r.arrayHeader()) {
                    try r.arrayHeader(count: 2)
                    let server = try r.unsigned()
                    let (ref, base) = try decodeUpload(&r)
                    commit.outbox.append((server, ref, base))
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
