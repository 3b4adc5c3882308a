// The instance's change feed (`Store.ChangeFeed`, owned by the store) as sync sessions see it, and
// all Sync knows of it: the newest complete transaction, a call for each newer one, and the
// change-log rows after a position as `LogBatch`es. Reading the change log, the ring, LISTEN/NOTIFY
// catch-up and the read cache stay in Store.

import Store
import SyncProtocol

struct ChangeSource: Sendable {
    let feed: ChangeFeed

    /// The newest transaction every row of which the feed has read.
    var head: Int64 { feed.head }

    /// The most bytes one read returns: a session asks for about its peer's credit, at most this.
    var maxReadBytes: Int { feed.readBytes }

    /// `onHead` is called with each new head, with no lock of the feed held; returns a token for
    /// `stopHeads`.
    func onHead(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64 { feed.addListener(onHead) }

    func stopHeads(_ token: UInt64) { feed.removeListener(token) }

    /// The rows after `after` from the feed's ring, without waiting; nil when the ring does not
    /// reach back that far or holds nothing newer (then `read` goes to the database).
    func cachedRead(after: ChangeLogPosition, maxBytes: Int) -> LogBatch? {
        feed.cachedRead(after: after, maxBytes: maxBytes).map(LogBatch.init)
    }

    /// The rows after `after`: from the ring when it reaches back that far, else from the database.
    func read(after: ChangeLogPosition, maxBytes: Int) async throws(StoreError) -> LogBatch {
        LogBatch(try await feed.read(after: after, maxBytes: maxBytes))
    }
}

extension LogBatch {
    init(_ page: ChangeLogPage) {
        self.init(entries: page.rows.map(LogEntry.init), end: page.end)
    }
}

extension LogEntry {
    init(_ r: ChangeLogRow) {
        self.init(txn: r.txn, seq: r.seq, document: DocumentRef(collection: r.collection, id: r.id),
                  kind: LogEntry.Kind(rawValue: r.kind) ?? .evict, delta: r.delta, value: r.value,
                  origin: r.origin.map { UInt64(bitPattern: $0) }, state: r.state)
    }
}
