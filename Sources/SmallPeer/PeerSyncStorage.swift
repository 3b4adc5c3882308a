// The small peer as the storage of the sync sessions it serves (Sync's `SyncStorage`, docs/SMALLPEER.md
// "Serving other peers"): its change log (PeerChangeLog.swift), pages of a subscription's documents
// in `_id` order, full states, and uploads merged through the peer's durable commit path. Every
// call takes the peer's lock once (per batch, page, fetch or upload) and works in memory.

import CRDT
import DQL
import Sync
import Synchronization
import SyncProtocol
import Values

struct PeerSyncStorage: SyncStorage {
    let peer: SmallPeer

    /// Rows per log read (as the server's change feed reads).
    static let logReadRows = 1000
    /// Documents an initial-sync page looks at per row it may return: a subscription matching few
    /// documents of a large collection answers with short pages rather than hold the lock long.
    static let pageScanFactor = 16

    /// A small peer has no event loops of its own for this: its requests are short and in memory.
    var preferredExecutor: any TaskExecutor { globalConcurrentExecutor }

    var logHead: Int64 { peer.state.withLock { $0.log.head } }

    var maxLogReadBytes: Int { peer.state.withLock { $0.log.maxBytes } }

    func addHeadListener(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64 {
        peer.state.withLock { s in
            s.nextHeadListener += 1
            s.headListeners[s.nextHeadListener] = onHead
            return s.nextHeadListener
        }
    }

    func removeHeadListener(_ token: UInt64) { _ = peer.state.withLock { $0.headListeners.removeValue(forKey: token) } }

    func cachedLogRead(after: ChangeLogPosition, maxBytes: Int) -> LogBatch? {
        peer.state.withLock { s in
            guard s.log.head > after.completeThrough else { return nil }
            return Self.read(s, after: after, maxBytes: maxBytes)
        }
    }

    /// A session that fell behind the log (it dropped the commits after the session's cursor)
    /// is closed with "try again later": it resumes from its checkpoint, which the log no longer
    /// reaches, and syncs again.
    func readLog(after: ChangeLogPosition, maxBytes: Int) async throws(SyncStorageError) -> LogBatch {
        let batch = peer.state.withLock { s in Self.read(s, after: after, maxBytes: maxBytes) }
        guard let batch else { throw .unavailable("the session fell behind this peer's change log") }
        return batch
    }

    /// The rows after `after` with their documents' current values (as the server's feed reads
    /// them: a later change is included, which merging still handles). States only for changes
    /// that came from another peer: a session needs it to tell that its own peer's upload is the
    /// whole document (not sent back); others fetch the few they need (documents entering a
    /// subscription).
    static func read(_ s: PeerState, after: ChangeLogPosition, maxBytes: Int) -> LogBatch? {
        guard let read = s.log.read(after: after, maxRows: logReadRows, maxBytes: maxBytes) else { return nil }
        let entries = read.rows.map { r in
            LogEntry(txn: r.position.txn, seq: r.position.seq, document: r.document, kind: r.kind, delta: r.delta,
                     value: r.kind == .delete ? nil : s.store.value(r.document), origin: r.origin,
                     state: r.origin == nil ? nil : s.store.document(r.document)?.encode())
        }
        return LogBatch(entries: entries, end: read.end)
    }

    func changeLogReaches(back checkpoint: Int64) async throws(SyncStorageError) -> Bool {
        peer.state.withLock { $0.log.reaches(back: checkpoint) }
    }

    func fetchDocuments(_ refs: [DocumentRef]) async throws(SyncStorageError) -> [FetchedDocument] {
        peer.state.withLock { s in
            refs.compactMap { ref in
                s.store.document(ref).map { FetchedDocument(document: ref, state: $0.encode(), value: s.store.value(ref)) }
            }
        }
    }

    /// A small peer serves its neighbours with every permission (`SmallPeer+Serve`): no write rules to apply.
    func mergeDeltas(_ entries: [UploadEntry], origin: UInt64, writeRules: DocumentRules) async throws(SyncStorageError)
        -> (txn: Int64, rejected: [UploadRejection]) {
        do { return try peer.mergeUploads(entries, origin: origin) } catch { throw SyncStorageError(error) }
    }

    func readSyncPage(_ query: SubscriptionQuery, after: Value?, limit: Int, maxBytes: Int) async throws(SyncStorageError) -> any SyncStoragePage {
        let limit = max(1, limit)
        return peer.state.withLock { s in
            var rows: [DocumentPage.Row] = []
            var bytes = 0, looked = 0
            var last = after
            let ids = s.store.collections[query.collection]?.ids(after: after) ?? []
            for id in ids {
                if rows.count >= limit || (bytes >= maxBytes && !rows.isEmpty) || looked >= limit * Self.pageScanFactor { break }
                looked += 1
                last = id
                let ref = DocumentRef(collection: query.collection, id: id)
                // Live documents only (tombstones stay out, as on the server); a document whose
                // check needs more than the per-document budget does not match.
                guard let value = s.store.value(ref), let doc = s.store.document(ref),
                      (try? InMemoryEvaluation.subscriptionMatches(query.query, value).matches) == true else { continue }
                let state = doc.encode()
                bytes += state.count
                rows.append(DocumentPage.Row(id: id, state: state))
            }
            let isLast = ids.count == looked
            return PeerSyncPage(boundary: PageBoundary(nextAfter: last, isLast: isLast, rows: rows.count, stateBytes: bytes),
                                txn: s.log.head, decoded: rows)
        }
    }
}

/// A page read under the peer's lock: nothing is left to decode.
struct PeerSyncPage: SyncStoragePage {
    let boundary: PageBoundary
    let txn: Int64
    let decoded: [DocumentPage.Row]

    func rows() async throws(SyncStorageError) -> [DocumentPage.Row] { decoded }
}

extension SyncStorageError {
    /// A closed peer is unavailable (the session's peer retries later); a storage failure is not.
    init(_ error: SmallPeerError) {
        switch error {
        case .closed: self = .unavailable(error.description)
        default: self = .failed(error.description)
        }
    }
}

extension SmallPeer {
    /// Merges a served peer's upload in one durable commit logged with `origin` (the uploader's
    /// site). Each entry's document becomes pending for every server this peer links with (unless it
    /// is already), with the version it had before (what that server may already have): changes
    /// that reach this peer go on to its servers too. Returns the transaction (the log's head when nothing changed)
    /// and the entries that could not be applied.
    func mergeUploads(_ entries: [UploadEntry], origin: UInt64) throws(SmallPeerError) -> (txn: Int64, rejected: [UploadRejection]) {
        let txn = try state.withLock { st throws(SmallPeerError) -> (Int64, [UploadRejection]) in
            var commit = Commit(clock: 0)
            var installed: [DocumentRef: Document] = [:]
            var rejected: [UploadRejection] = []
            var replica = st.store.replica
            for (i, e) in entries.enumerated() {
                let ref = e.document
                do {
                    let delta = try Delta.decode(e.delta)
                    let stored = st.store.document(ref)
                    var doc = try installed[ref] ?? stored ?? Document(id: ref.id)
                    let before = doc.versionVector
                    // A delta this peer already had changes nothing: nothing to store or log.
                    guard !(try doc.merge(delta)).isEmpty || doc.versionVector != before else { continue }
                    if installed[ref] == nil {
                        st.store.markChanged(ref, before: stored?.versionVector ?? VersionVector(), origin: origin, into: &commit)
                    }
                    installed[ref] = doc
                    commit.documents.append((ref, .merge(delta)))
                    if let dot = delta.newestDot { replica.clock.observe(dot, wallMillis: replica.wallClock()) }
                } catch CRDTError.deltaGap {
                    rejected.append(UploadRejection(index: i, message: UploadRejection.deltaGapMessage))
                } catch {
                    rejected.append(UploadRejection(index: i, message: "\(error)"))
                }
            }
            guard !commit.documents.isEmpty else { return (st.log.head, rejected) }
            commit.clock = replica.clock.last.rawValue
            try st.commit(commit, documents: installed.map { ($0.key, $0.value) }, replica: replica, origin: origin)
            return (st.log.head, rejected)
        }
        deliverObserverEvents()
        announceLogHead()
        notifySync()
        return txn
    }

    /// Tells the sessions this peer serves of a new log head (outside the lock, as the server's feed does).
    func announceLogHead() {
        let (listeners, head) = state.withLock { s -> ([@Sendable (Int64) -> Void], Int64?) in
            guard s.log.head > s.announcedHead else { return ([], nil) }
            s.announcedHead = s.log.head
            return (Array(s.headListeners.values), s.log.head)
        }
        if let head { for listener in listeners { listener(head) } }
    }
}
