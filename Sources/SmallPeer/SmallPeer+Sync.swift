// What the sync client needs from the local store: subscriptions and their resume points, merging
// what the server sends, the outbox of local changes, and acknowledgements. Each step that changes
// the store is one durable commit.

import CRDT
import DQL
import Synchronization
import SyncPeer
import SyncProtocol
import Values

/// One document's upload: the delta the server lacks, and what it covered (for the ack).
struct PendingUpload: SyncUpload {
    var ref: DocumentRef
    var delta: [UInt8]
    /// This peer's newest dot in the document when the delta was taken.
    var localDot: HLCTimestamp?
    /// The full document vector when the delta was taken (the server has it after the ack).
    var covered: VersionVector
    /// Whether the delta was taken since the empty vector (a full state).
    var isFullState: Bool
}

extension SmallPeer {
    /// Adds a sync subscription (kept until cancelled; not persisted: register it again after a
    /// restart, and it resumes from its checkpoint). The query must be `SELECT * FROM c [WHERE ...]`.
    /// The same query and arguments twice are one subscription; cancelling either handle ends it.
    public func subscribe(_ query: String, arguments: [String: Value] = [:]) throws(SmallPeerError) -> CancelHandle {
        let statement: Statement
        do { statement = try DQL.parse(query) } catch { throw .syntax(error) }
        guard case .select(let s) = statement, s.projections == [.all], s.groupBy.isEmpty, s.having == nil,
              s.orderBy.isEmpty, s.limit == nil, s.offset == nil, !s.distinct else {
            throw .invalid("a sync subscription is SELECT * FROM collection [WHERE ...] (no DISTINCT, GROUP BY, ORDER BY, LIMIT, OFFSET)")
        }
        let sub = SyncSubscription(query: query, arguments: arguments, collection: s.from.name)
        state.withLock { st in
            if !st.subscriptions.contains(sub) { st.subscriptions.append(sub) }
        }
        notifySync()
        return CancelHandle { [weak self] in
            self?.state.withLock { st in st.subscriptions.removeAll { $0 == sub } }
            self?.notifySync()
        }
    }

    public var subscriptions: [SyncSubscription] { state.withLock { $0.subscriptions } }

    /// The last checkpoint `server` (a site id; nil: the one server this peer linked with, else
    /// any of them) sent for a subscription (nil before its first `synced`).
    public func checkpoint(for sub: SyncSubscription, server: UInt64? = nil) -> Int64? {
        state.withLock { st in
            if let server { return st.store.checkpoints[.init(server: server, key: sub.key)] }
            return st.store.checkpoints.first { $0.key.key == sub.key && $0.key.server != LocalStore.noServer }?.value
        }
    }

    /// Number of documents some server may lack (local changes, and changes that came from one
    /// server or a served peer, that another server has not acknowledged).
    public var pendingUploadCount: Int { state.withLock { $0.store.pendingCount } }

    /// Number of documents `server` (a site id) may lack.
    public func pendingUploadCount(server: UInt64) -> Int { state.withLock { $0.store.outbox[server]?.count ?? 0 } }

    /// The servers (site ids) this peer has linked with.
    public var linkedServers: Set<UInt64> { state.withLock { $0.store.linkedServers } }

    /// Registers a sync client's local-change notification; returns the token to remove it with.
    func addSyncListener(_ listener: @escaping @Sendable () -> Void) -> UInt64 {
        state.withLock { st in
            st.nextSyncListener += 1
            st.syncListeners[st.nextSyncListener] = listener
            return st.nextSyncListener
        }
    }

    func removeSyncListener(_ token: UInt64) { _ = state.withLock { $0.syncListeners.removeValue(forKey: token) } }

    /// Records that a session with `server` began: a server seen for the first time gets an
    /// upload state (LocalStore.linking), persisted before anything is uploaded to it.
    func linkServer(_ server: UInt64) throws(SmallPeerError) {
        try state.withLock { st throws(SmallPeerError) in
            guard let commit = st.store.linking(server) else { return }
            try st.commit(commit, documents: [])
        }
    }

    /// Checkpoint `server` handed out and held-document hashes to resume `sub` with on a link to
    /// it; nil before its first sync with that server.
    func resume(for sub: SyncSubscription, server: UInt64) -> (checkpoint: Int64, have: [UInt64])? {
        state.withLock { st in
            guard let cp = st.store.checkpoints[.init(server: server, key: sub.key)] else { return nil }
            return (cp, st.store.haveHashes(sub.collection, server: server))
        }
    }

    /// Merges entries of `docs` / `changes` into the store in one commit, logged with `origin` (the
    /// server's site: the sessions this peer serves do not send them back to it), and pending for
    /// every other server this peer linked with. Returns the
    /// documents whose delta could not be applied (not held, or a gap): the client asks for them
    /// with `want`. A delta this peer already had changes nothing and is neither stored nor logged.
    func applyFromServer(_ entries: [ChangeEntry], origin: UInt64? = nil) throws(SmallPeerError) -> [DocumentRef] {
        let (wanted, forOthers) = try state.withLock { st throws(SmallPeerError) -> ([DocumentRef], Bool) in
            var wanted: [DocumentRef] = []
            var commit = Commit(clock: 0)
            var installed: [DocumentRef: Document] = [:]
            var replica = st.store.replica
            for e in entries {
                let local = installed[e.document] ?? st.store.document(e.document)
                let firstChange = installed[e.document] == nil
                do {
                    switch e.payload {
                    case .state(let bytes):
                        let remote = try Document.decode(bytes)
                        guard remote.id == e.document.id else { wanted.append(e.document); continue }
                        if var doc = local {
                            let delta = remote.delta(since: doc.versionVector)
                            guard !delta.isEmpty else { continue }
                            _ = try doc.merge(delta)
                            installed[e.document] = doc
                            commit.documents.append((e.document, .merge(delta)))
                            if let dot = delta.newestDot { replica.clock.observe(dot, wallMillis: replica.wallClock()) }
                        } else {
                            installed[e.document] = remote
                            commit.documents.append((e.document, .replace(remote)))
                        }
                        if firstChange { st.store.markChanged(e.document, before: local?.versionVector ?? VersionVector(), origin: origin, into: &commit) }
                    case .delta(let bytes):
                        guard var doc = local else { wanted.append(e.document); continue }
                        let delta = try Delta.decode(bytes)
                        let before = doc.versionVector
                        guard !(try doc.merge(delta)).isEmpty || doc.versionVector != before else { continue }
                        installed[e.document] = doc
                        commit.documents.append((e.document, .merge(delta)))
                        if let dot = delta.newestDot { replica.clock.observe(dot, wallMillis: replica.wallClock()) }
                        if firstChange { st.store.markChanged(e.document, before: before, origin: origin, into: &commit) }
                    }
                } catch {
                    // A gap, or bytes that do not decode: ask for the full state rather than diverge.
                    wanted.append(e.document)
                }
            }
            if commit.documents.isEmpty { return (wanted, false) }
            commit.clock = replica.clock.last.rawValue
            try st.commit(commit, documents: commit.documents.compactMap { ref, _ in installed[ref].map { (ref, $0) } },
                          replica: replica, origin: origin)
            return (wanted, !commit.outbox.isEmpty || !commit.changedWhilePending.isEmpty)
        }
        deliverObserverEvents()
        announceLogHead()
        // Pending for another server now: its client uploads it (one server alone never gets here).
        if forOthers { notifySync() }
        return wanted
    }

    /// After a full re-sync of a resumed subscription (PROTOCOL.md §4.5): evicts the documents the
    /// peer holds that match `sub` and were not delivered again (deleted and reaped, or no longer
    /// matching on the server). Kept: documents with local changes not yet uploaded, and documents
    /// that match another subscription (that one's sync decides about them). Returns the evicted ones.
    func evictNotResent(_ sub: SyncSubscription, delivered: Set<DocumentRef>) throws(SmallPeerError) -> [DocumentRef] {
        let now = Int64(clamping: configuration.wallClock())
        func query(_ s: SyncSubscription) -> SelectQuery? {
            guard case .select(let statement)? = try? DQL.parse(s.query) else { return nil }
            return try? SelectQuery(statement, context: EvaluationContext(arguments: s.arguments, nowMilliseconds: now, strictMode: configuration.strictMode))
        }
        guard let mine = query(sub) else { return [] }
        let evicted = try state.withLock { st throws(SmallPeerError) -> [DocumentRef] in
            let others = st.subscriptions.filter { $0.key != sub.key && $0.collection == sub.collection }.compactMap(query)
            var evict: [DocumentRef] = []
            for value in st.store.values(of: sub.collection) {
                guard let id = value["_id"] else { continue }
                let ref = DocumentRef(collection: sub.collection, id: id)
                guard !delivered.contains(ref), !st.store.isPending(ref), (try? mine.matches(value)) == true,
                      !others.contains(where: { (try? $0.matches(value)) == true }) else { continue }
                evict.append(ref)
            }
            try st.evict(evict)
            return evict
        }
        deliverObserverEvents()
        return evicted
    }

    /// The server answered `want` with `gone` (PROTOCOL.md §4.7): it has no such document, or
    /// this peer may not read it, so the copy here (one a delta did not apply to) would never get
    /// another change from it. Evicts those copies, as a full re-sync evicts what it did not send
    /// again (§4.5), except those with local changes not yet uploaded. Returns the evicted ones.
    func evictGone(_ refs: [DocumentRef]) throws(SmallPeerError) -> [DocumentRef] {
        let evicted = try state.withLock { st throws(SmallPeerError) -> [DocumentRef] in
            let evict = refs.filter { st.store.document($0) != nil && !st.store.isPending($0) }
            try st.evict(evict)
            return evict
        }
        deliverObserverEvents()
        return evicted
    }

    /// Persists checkpoints `server` sent (after everything received before them was applied).
    func saveCheckpoints(_ checkpoints: [(key: String, txn: Int64)], server: UInt64) throws(SmallPeerError) {
        guard !checkpoints.isEmpty else { return }
        try state.withLock { st throws(SmallPeerError) in
            let fresh = checkpoints.filter { st.store.checkpoints[.init(server: server, key: $0.key)] != $0.txn }
            guard !fresh.isEmpty else { return }
            var commit = Commit(clock: st.store.replica.clock.last.rawValue)
            commit.checkpoints = fresh.map { (server, $0.key, $0.txn) }
            try st.commit(commit, documents: [])
        }
    }

    /// Up to `maxDocuments` / about `maxBytes` of the documents `server` may lack, not in
    /// `excluding`, as deltas.
    func takeUploads(excluding: Set<DocumentRef>, maxDocuments: Int, maxBytes: Int, server: UInt64) -> [PendingUpload] {
        state.withLock { st in
            var out: [PendingUpload] = []
            var bytes = 0
            // Sorted so uploads go in a deterministic order (tests, logs).
            for (ref, base) in (st.store.outbox[server] ?? [:]).sorted(by: { $0.key.collection < $1.key.collection || ($0.key.collection == $1.key.collection && DQLOrderHelper.less($0.key.id, $1.key.id)) })
            where !excluding.contains(ref) {
                guard let doc = st.store.document(ref) else { continue }
                let delta = doc.delta(since: base).encode()
                if !out.isEmpty && (out.count >= maxDocuments || bytes + delta.count > maxBytes) { break }
                out.append(PendingUpload(ref: ref, delta: delta, localDot: doc.versionVector[st.store.replica.site],
                                         covered: doc.versionVector, isFullState: base.entries.isEmpty))
                st.store.changedSinceTaken[server]?.remove(ref)
                bytes += delta.count
            }
            return out
        }
    }

    /// The next upload sequence number (persisted with the next acknowledgement).
    func allocateUploadSeq() -> UInt64 {
        state.withLock { st in
            let s = st.store.nextUploadSeq
            st.store.nextUploadSeq += 1
            return s
        }
    }

    /// Records `server`'s ack of `uploads` (its upload state only): accepted documents without newer
    /// changes (local, or from another server or a served peer) leave it; changed ones keep a base
    /// that now includes what was sent. A rejected delta is retried once as the full state (the server may lack an earlier
    /// change); a rejected full state, or any entry refused for its permissions (a write rule: sending it again would be
    /// refused the same way), leaves it and is returned with the server's reason.
    func acknowledge(_ uploads: [PendingUpload], rejected: [UploadRejection], server: UInt64) throws(SmallPeerError) -> [(DocumentRef, String)] {
        try state.withLock { st throws(SmallPeerError) -> [(DocumentRef, String)] in
            var commit = Commit(clock: st.store.replica.clock.last.rawValue)
            var dropped: [(DocumentRef, String)] = []
            let rejectedByIndex = Dictionary(rejected.map { ($0.index, $0.message) }, uniquingKeysWith: { a, _ in a })
            let pending = st.store.outbox[server] ?? [:]
            for (i, u) in uploads.enumerated() where pending[u.ref] != nil {
                if let message = rejectedByIndex[i] {
                    if u.isFullState || UploadRejection.isPermissionRefusal(message) {
                        commit.outbox.append((server, u.ref, nil))
                        dropped.append((u.ref, message))
                    } else {
                        commit.outbox.append((server, u.ref, VersionVector()))
                    }
                    continue
                }
                // A local write since the take moved the own dot; a change from elsewhere is noted.
                let current = st.store.document(u.ref)
                let changedElsewhere = st.store.changedSinceTaken[server]?.contains(u.ref) ?? false
                if current == nil || (current?.versionVector[st.store.replica.site] == u.localDot && !changedElsewhere) {
                    commit.outbox.append((server, u.ref, nil))
                } else {
                    commit.outbox.append((server, u.ref, u.covered))
                }
            }
            commit.nextUploadSeq = st.store.nextUploadSeq
            try st.commit(commit, documents: [])
            return dropped
        }
    }
}

extension PeerState {
    /// Removes these local copies in one commit, without tombstones (EVICT: nothing syncs).
    mutating func evict(_ refs: [DocumentRef]) throws(SmallPeerError) {
        guard !refs.isEmpty else { return }
        var commit = Commit(clock: store.replica.clock.last.rawValue)
        commit.documents = refs.map { ($0, .evict) }
        try self.commit(commit, documents: refs.map { ($0, nil) })
    }
}
