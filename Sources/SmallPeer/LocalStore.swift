// The small peer's state in memory: every document it holds (CRDT state and materialized value),
// per server it links with the documents that server may lack and the subscription checkpoints it
// handed out, and the writer (site id + hybrid logical clock). It is rebuilt at open by replaying
// the commits of the peer's directory (PeerStorage) and changed only by whole commits, after they
// are durable.

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
    var collections: [String: LocalCollection] = [:]
    /// Server site 0 (no server's, PROTOCOL.md §4.2): the upload state of "the server not yet
    /// identified" (changes made while no server was ever linked), and the checkpoints of records
    /// written before checkpoints named their server.
    static let noServer: UInt64 = 0

    /// Per server site: the documents that server may lack, each with the version vector it is
    /// known to have of it (everything in it came from that server or was acknowledged by it).
    /// The upload of a document is `document.delta(since: base)`. A server without pending
    /// documents has no entry.
    var outbox: [UInt64: [DocumentRef: VersionVector]] = [:]
    /// The servers this peer has linked with: every change goes to each of them but its origin.
    var linkedServers: Set<UInt64> = []
    /// Per server: pending documents that a change from elsewhere (another server, a served peer)
    /// reached since their upload was taken; the upload does not carry it, so its ack must not
    /// clear them. In memory: after a restart every pending document is taken anew.
    var changedSinceTaken: [UInt64: Set<DocumentRef>] = [:]
    /// Per server and subscription key (query + arguments): the last checkpoint that server sent.
    var checkpoints: [CheckpointKey: Int64] = [:]
    var nextUploadSeq: UInt64 = 1

    struct CheckpointKey: Hashable, Sendable {
        var server: UInt64
        var key: String
    }

    init(site: SiteID, wallClock: @escaping @Sendable () -> UInt64 = Replica.systemMillis) {
        replica = Replica(site: site, wallClock: wallClock)
    }

    func document(_ ref: DocumentRef) -> Document? { collections[ref.collection]?[ref.id]?.document }

    /// Live documents' values of `collection`, ordered by `_id` (deterministic scans for queries).
    func values(of collection: String) -> [Value] { collections[collection]?.liveValues ?? [] }

    /// The live value of one document (nil: absent or a tombstone).
    func value(_ ref: DocumentRef) -> Value? { collections[ref.collection]?[ref.id]?.value }

    mutating func install(_ ref: DocumentRef, _ document: Document?) {
        if let document {
            collections[ref.collection, default: LocalCollection()].put(ref.id, StoredDocument(document))
        } else {
            collections[ref.collection]?.remove(ref.id)
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
        for server in c.linkedServers { linkedServers.insert(server) }
        for (server, ref, base) in c.outbox {
            outbox[server, default: [:]][ref] = base
            if outbox[server]?.isEmpty == true { outbox[server] = nil }
            if base == nil { changedSinceTaken[server]?.remove(ref) }
        }
        for (server, ref) in c.changedWhilePending { changedSinceTaken[server, default: []].insert(ref) }
        for (server, key, txn) in c.checkpoints { checkpoints[CheckpointKey(server: server, key: key)] = txn }
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
            for (id, stored) in docs.documents {
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
        current.linkedServers = linkedServers.sorted()
        current.outbox = outbox.flatMap { server, pending in pending.map { (server, $0.key, $0.value) } }
        // Checkpoints of no server are never resumed from: a snapshot drops them.
        current.checkpoints = checkpoints.compactMap { $0.key.server == Self.noServer ? nil : ($0.key.server, $0.key.key, $0.value) }
        current.nextUploadSeq = nextUploadSeq
        commits.append(current)
        return commits
    }

    /// Hashes (PROTOCOL.md §4.3) of the documents held in `collection`, tombstones included,
    /// strictly ascending: the `have` of a subscription resumed with `server`. Left out: documents
    /// `server` has no version of (base empty) that were not uploaded to it yet. The server
    /// takes `have` to mean "has every change up to the checkpoint"; such a copy may lack a server
    /// history (a tombstone the initial sync did not send, another peer's document with the same
    /// `_id`), and the server sends the merged state back only for an upload of a document it does
    /// not think the peer holds (issue #16 item 13: a peer kept its INITIAL insert alive over a
    /// server tombstone for good).
    func haveHashes(_ collection: String, server: UInt64) -> [UInt64] {
        guard let docs = collections[collection] else { return [] }
        let pending = outbox[server] ?? [:]
        let hashes = docs.ids.filter { id in
            pending[DocumentRef(collection: collection, id: id)].map { !$0.entries.isEmpty } ?? true
        }.map { DocumentHash.of(collection: collection, id: $0) }
        return Array(Set(hashes)).sorted()
    }

    /// Whether some server may lack this peer's version of `ref`.
    func isPending(_ ref: DocumentRef) -> Bool { outbox.values.contains { $0[ref] != nil } }

    /// Documents pending for at least one server.
    var pendingCount: Int {
        if outbox.count <= 1 { return outbox.first?.value.count ?? 0 }
        return Set(outbox.values.flatMap(\.keys)).count
    }

    /// Adds to `commit` the upload entries for a change of `ref` whose version before it was
    /// `before`: every linked server but `origin` (the one the change came from) may lack it now,
    /// and while no server was ever linked, the one not yet identified. A document already
    /// pending for a server keeps its older base. Call once per document and commit.
    func markChanged(_ ref: DocumentRef, before: VersionVector, origin: UInt64?, into commit: inout Commit) {
        let servers = linkedServers.isEmpty ? [Self.noServer] : linkedServers.filter { $0 != origin }
        for server in servers {
            if outbox[server]?[ref] == nil {
                commit.outbox.append((server, ref, before))
            } else if origin != nil {
                // A local write moves this peer's own dot, which the ack compares; this does not.
                commit.changedWhilePending.append((server, ref))
            }
        }
    }

    /// Drops `ref` from every server's upload state (an evicted copy takes its changes with it).
    func forgetUploads(_ ref: DocumentRef, into commit: inout Commit) {
        for (server, pending) in outbox where pending[ref] != nil { commit.outbox.append((server, ref, nil)) }
    }

    /// The commit that links `server` for the first time: the first server ever takes over the
    /// upload state of the one not yet identified (it is that server); a later one may lack
    /// anything, so every document this peer holds is pending for it since the empty vector (the
    /// server merges what it had idempotently).
    func linking(_ server: UInt64) -> Commit? {
        guard server != Self.noServer, !linkedServers.contains(server) else { return nil }
        var commit = Commit(clock: replica.clock.last.rawValue)
        commit.linkedServers = [server]
        if linkedServers.isEmpty {
            for (ref, base) in outbox[Self.noServer] ?? [:] {
                commit.outbox.append((server, ref, base))
                commit.outbox.append((Self.noServer, ref, nil))
            }
        } else {
            for (name, docs) in collections {
                for id in docs.ids { commit.outbox.append((server, DocumentRef(collection: name, id: id), VersionVector())) }
            }
        }
        return commit
    }
}

import DQL

enum DQLOrderHelper {
    static func less(_ a: Value?, _ b: Value?) -> Bool { DQLValueOrder.compare(a, b) < 0 }
}

/// One collection: documents by `_id`, and the `_id`s kept in DQL order (binary insertion), so a
/// scan needs no sort and an insert costs O(log n) comparisons plus one array move.
/// Ids are keys as the server's rows are (`DocumentIdentity`): `{k: 1}` and `{k: 1.0}` are one
/// document, held under the form it was first stored with.
struct LocalCollection: Sendable {
    private var byIdentity: [DocumentIdentity: StoredDocument] = [:]
    private(set) var order: [Value] = []

    var isEmpty: Bool { byIdentity.isEmpty }
    /// Every document, by the id form it is stored under.
    var documents: some Sequence<(id: Value, stored: StoredDocument)> { byIdentity.lazy.map { (id: $0.key.id, stored: $0.value) } }
    var ids: some Sequence<Value> { byIdentity.keys.lazy.map(\.id) }

    subscript(id: Value) -> StoredDocument? { byIdentity[DocumentIdentity(id)] }

    var liveValues: [Value] { order.compactMap { self[$0]?.value } }

    mutating func put(_ id: Value, _ stored: StoredDocument) {
        // An existing key keeps its form (Dictionary replaces the value, not the key).
        if byIdentity.updateValue(stored, forKey: DocumentIdentity(id)) == nil { order.insert(id, at: lowerBound(id)) }
    }

    mutating func remove(_ id: Value) {
        let key = DocumentIdentity(id)
        guard byIdentity.removeValue(forKey: key) != nil else { return }
        // Ids equal in DQL's order (e.g. {a: 1} and {a: 1.0}) are one key here: find the one stored.
        var i = lowerBound(id)
        while i < order.count, DQLValueOrder.compare(order[i], id) == 0 {
            if DocumentIdentity(order[i]) == key { order.remove(at: i); return }
            i += 1
        }
        order.removeAll { DocumentIdentity($0) == key }  // not reached while `order` is sorted; keeps it consistent anyway
    }

    /// The ids after `after` in DQL order (all of them for nil): where an initial-sync page starts.
    func ids(after: Value?) -> ArraySlice<Value> {
        guard let after else { return order[...] }
        var i = lowerBound(after)
        while i < order.count, DQLValueOrder.compare(order[i], after) == 0 { i += 1 }
        return order[i...]
    }

    /// The first index whose id is not below `id`.
    private func lowerBound(_ id: Value) -> Int {
        var lo = 0, hi = order.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if DQLValueOrder.compare(order[mid], id) < 0 { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }
}
