// What the serving side of a sync session (`SyncConnection`) needs from the storage behind it:
// the change log as a feed (its head, a call for each newer one, bounded reads after a position),
// whether that log still reaches back to a checkpoint, full states of documents, merging uploaded
// deltas durably, and initial-sync pages of a subscription. BigPeer's PostgreSQL store implements
// it (Store, `DocumentSyncStorage`), and so does a small peer over its in-memory store (SmallPeer,
// `PeerSyncStorage`): the same sessions serve from either.
//
// A session calls these per batch, page or upload, never per row, so the existential costs one
// indirect call each.

import DQL
import SyncProtocol
import Values

public protocol SyncStorage: Sendable {
    /// Where the session's storage requests, page reads and heartbeat run when its transport has
    /// no event loop of its own (see the top of SyncConnection.swift).
    var preferredExecutor: any TaskExecutor { get }

    /// The newest transaction every row of which the feed has read.
    var logHead: Int64 { get }

    /// The most bytes one log read returns: a session asks for about its peer's credit, at most this.
    var maxLogReadBytes: Int { get }

    /// Calls `onHead` with each new head, with no lock of the storage held; returns a token for
    /// `removeHeadListener`.
    func addHeadListener(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64

    func removeHeadListener(_ token: UInt64)

    /// The log after `after` without waiting (what the storage holds in memory); nil when it
    /// does not reach back that far or holds nothing newer (then `readLog` is asked).
    func cachedLogRead(after: ChangeLogPosition, maxBytes: Int) -> LogBatch?

    /// The log after `after`, in (txn, seq) order, at most about `maxBytes` (the first row always).
    func readLog(after: ChangeLogPosition, maxBytes: Int) async throws(SyncStorageError) -> LogBatch

    /// Whether every change after `checkpoint` is still in the log (else the peer syncs again).
    func changeLogReaches(back checkpoint: Int64) async throws(SyncStorageError) -> Bool

    /// Full states and values of these documents (missing ones are left out).
    func fetchDocuments(_ refs: [DocumentRef]) async throws(SyncStorageError) -> [FetchedDocument]

    /// Merges uploaded deltas in one transaction logged with `origin` (the uploader's site id),
    /// returning once it is durable: the transaction and the entries (indexes into `entries`)
    /// that were not applied — among them those whose document does not match the uploader's
    /// `writeRules` before and after the entry (docs/AUTH.md, "Write rules").
    func mergeDeltas(_ entries: [UploadEntry], origin: UInt64, writeRules: DocumentRules) async throws(SyncStorageError)
        -> (txn: Int64, rejected: [UploadRejection])

    /// The first step of reading an initial-sync page: live documents of `query` with `_id`
    /// above `after` in id order, at most `limit` rows whose states add up to at most `maxBytes`
    /// (the first row always). Where the page ends is known at once; its rows are decoded by
    /// `SyncStoragePage.rows()`, so the next read can start meanwhile.
    func readSyncPage(_ query: SubscriptionQuery, after: Value?, limit: Int, maxBytes: Int) async throws(SyncStorageError) -> any SyncStoragePage
}

/// An initial-sync page read but not yet decoded (`SyncStorage.readSyncPage`).
public protocol SyncStoragePage: Sendable {
    /// Where the page ends and how large it is.
    var boundary: PageBoundary { get }
    /// The snapshot (transaction) the page was read at.
    var txn: Int64 { get }
    /// The page's documents in id order (those the query's in-memory part rejects left out).
    func rows() async throws(SyncStorageError) -> [DocumentPage.Row]
}

/// Why a storage request failed, as far as the session's peer is concerned: the session closes
/// with `tryAgainLater` for `unavailable`, with an internal error otherwise.
public enum SyncStorageError: Error, Sendable, CustomStringConvertible {
    /// The storage is unreachable, restarting or timed out: the peer should retry later.
    case unavailable(String)
    /// Anything else (the storage's own description, for logs).
    case failed(String)

    public var description: String {
        switch self {
        case .unavailable(let m): "unavailable: \(m)"
        case .failed(let m): m
        }
    }
}
