// The small peer's state in memory: every document it holds (CRDT state and materialized value),
// the outbox of local changes the server has not acknowledged, subscription checkpoints, and the
// writer (site id + hybrid logical clock). It is rebuilt at open by replaying the commits of the
// peer's directory (PeerStorage) and changed only by whole commits, after they are durable.

import CRDT
import SyncProtocol
import Values

/// A document and its current value (nil: a tombstone, kept so the delete syncs and merges).
struct StoredDocument: Sendable {
    var document: Document
    var value: Value?

    init(_ document: Document) {
        self.document = document
        self.value = document.materialize()
    }
}

struct LocalStore: Sendable {
    var replica: Replica
    var collections: [String: [Value: StoredDocument]] = [:]
    /// Documents with local changes to upload, each with the version vector the server is known to
    /// have of it (everything in it came from the server or was acknowledged). The upload of a
    /// document is `document.delta(since: base)`.
    var outbox: [DocumentRef: VersionVector] = [:]
    /// Per subscription key (query + arguments): the last checkpoint received.
    var checkpoints: [String: Int64] = [:]
    var nextUploadSeq: UInt64 = 1

    init(site: SiteID, wallClock: @escaping @Sendable () -> UInt64 = Replica.systemMillis) {
        replica = Replica(site: site, wallClock: wallClock)
    }

    func document(_ ref: DocumentRef) -> Document? { collections[ref.collection]?[ref.id]?.document }

    /// Live documents' values of `collection`, ordered by `_id` (deterministic scans for queries).
    func values(of collection: String) -> [Value] {
        guard let docs = collections[collection] else { return [] }
        return docs.values.compactMap(\.value).sorted { DQLOrderHelper.less($0["_id"], $1["_id"]) }
    }

    mutating func install(_ ref: DocumentRef, _ document: Document?) {
        if let document {
            collections[ref.collection, default: [:]][ref.id] = StoredDocument(document)
        } else {
            collections[ref.collection]?[ref.id] = nil
            if collections[ref.collection]?.isEmpty == true { collections[ref.collection] = nil }
        }
    }

    /// Re-applies a durable commit at open. Deltas merge exactly as when they were first applied
    /// (the log holds them in the same order), so the result is the state that was committed.
    mutating func replay(_ c: Commit) throws(CRDTError) {
        for (ref, op) in c.documents {
            switch op {
            case .merge(let delta):
                var doc: Document
                if let existing = document(ref) { doc = existing } else { doc = try Document(id: ref.id) }
                _ = try doc.merge(delta)
                install(ref, doc)
            case .replace(let doc): install(ref, doc)
            case .evict: install(ref, nil)
            }
        }
        finish(c)
    }

    /// The parts of a commit that are not documents (documents are installed by the caller).
    mutating func finish(_ c: Commit) {
        for (ref, base) in c.outbox { outbox[ref] = base }
        for (key, txn) in c.checkpoints { checkpoints[key] = txn }
        if let s = c.nextUploadSeq { nextUploadSeq = s }
        if c.clock > replica.clock.last.rawValue {
            replica.clock = HybridLogicalClock(last: HLCTimestamp(rawValue: c.clock), maxForwardDriftMillis: replica.clock.maxForwardDriftMillis)
        }
    }

    /// The whole state as commits for a snapshot, at most about `recordBytes` of documents each;
    /// the last one carries the outbox, checkpoints, sequence number and clock.
    func snapshotCommits(recordBytes: Int = 4 << 20) -> [Commit] {
        let clock = replica.clock.last.rawValue
        var commits: [Commit] = []
        var current = Commit(clock: clock)
        var size = 0
        for (name, docs) in collections.sorted(by: { $0.key < $1.key }) {
            for (id, stored) in docs {
                let encodedSize = stored.document.encode().count
                if size > 0 && size + encodedSize > recordBytes {
                    commits.append(current)
                    current = Commit(clock: clock)
                    size = 0
                }
                current.documents.append((DocumentRef(collection: name, id: id), .replace(stored.document)))
                size += encodedSize
            }
        }
        current.outbox = outbox.map { ($0.key, $0.value) }
        current.checkpoints = checkpoints.map { ($0.key, $0.value) }
        current.nextUploadSeq = nextUploadSeq
        commits.append(current)
        return commits
    }

    /// Hashes (PROTOCOL.md §4.3) of every document held in `collection`, tombstones included,
    /// strictly ascending: the `have` of a resumed subscription.
    func haveHashes(_ collection: String) -> [UInt64] {
        guard let docs = collections[collection] else { return [] }
        return Array(Set(docs.keys.map { DocumentHash.of(collection: collection, id: $0) })).sorted()
    }
}

import DQL

enum DQLOrderHelper {
    static func less(_ a: Value?, _ b: Value?) -> Bool { DQLValueOrder.compare(a, b) < 0 }
}
