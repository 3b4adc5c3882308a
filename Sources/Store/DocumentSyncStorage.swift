// The PostgreSQL store as the storage of sync sessions (Sync's `SyncStorage`): the instance's
// change feed (`ChangeFeed`: the newest complete transaction, a call for each newer one, and the
// change-log rows after a position as `LogBatch`es), page reads, fetches and merges. Reading the
// change log, the ring, LISTEN/NOTIFY catch-up and the read cache stay in Store; this file only
// converts at the boundary (per batch, page or upload; rows are converted as they always were).

import DQL
import Sync
import SyncProtocol
import Values

/// `DocumentStore` behind a sync session (`SyncConnection(storage:)`).
public struct DocumentSyncStorage: SyncStorage {
    public let store: DocumentStore
    var feed: ChangeFeed { store.changeFeed }

    public init(_ store: DocumentStore) { self.store = store }

    public var preferredExecutor: any TaskExecutor { store.preferredExecutor }

    public var logHead: Int64 { feed.head }

    public var maxLogReadBytes: Int { feed.readBytes }

    public func addHeadListener(_ onHead: @escaping @Sendable (Int64) -> Void) -> UInt64 { feed.addListener(onHead) }

    public func removeHeadListener(_ token: UInt64) { feed.removeListener(token) }

    /// From the feed's ring (up-to-date sessions are served from it without a task or a query).
    public func cachedLogRead(after: ChangeLogPosition, maxBytes: Int) -> LogBatch? {
        feed.cachedRead(after: after, maxBytes: maxBytes).map(LogBatch.init)
    }

    /// From the ring when it reaches back that far, else from the database.
    public func readLog(after: ChangeLogPosition, maxBytes: Int) async throws(SyncStorageError) -> LogBatch {
        do throws(StoreError) { return LogBatch(try await feed.read(after: after, maxBytes: maxBytes)) } catch { throw SyncStorageError(error) }
    }

    public func changeLogReaches(back checkpoint: Int64) async throws(SyncStorageError) -> Bool {
        do throws(StoreError) { return try await store.changeLogReaches(back: checkpoint) } catch { throw SyncStorageError(error) }
    }

    public func fetchDocuments(_ refs: [DocumentRef]) async throws(SyncStorageError) -> [FetchedDocument] {
        do throws(StoreError) {
            return try await store.fetchDocuments(refs.map { ($0.collection, $0.id) }).map {
                FetchedDocument(document: DocumentRef(collection: $0.collection, id: $0.id), state: $0.state, value: $0.value)
            }
        } catch {
            throw SyncStorageError(error)
        }
    }

    public func mergeDeltas(_ entries: [UploadEntry], origin: UInt64, writeRules: DocumentRules) async throws(SyncStorageError)
        -> (txn: Int64, rejected: [UploadRejection]) {
        do throws(StoreError) {
            let items = entries.map { MergeItem(collection: $0.document.collection, id: $0.document.id, delta: $0.delta) }
            let r = try await store.mergeDeltas(items, origin: Int64(bitPattern: origin), writeRules: writeRules)
            return (r.txn, r.rejected.map { UploadRejection(index: $0.index, message: $0.message) })
        } catch {
            throw SyncStorageError(error)
        }
    }

    public func readSyncPage(_ query: SubscriptionQuery, after: Value?, limit: Int, maxBytes: Int) async throws(SyncStorageError) -> any SyncStoragePage {
        do throws(StoreError) {
            return try await store.readSyncPage(query.statement, arguments: query.arguments, after: after, limit: limit, maxBytes: maxBytes)
        } catch {
            throw SyncStorageError(error)
        }
    }
}

extension SyncPageRead: SyncStoragePage {
    public var boundary: PageBoundary { PageBoundary(nextAfter: nextAfter, isLast: isLast, rows: rowCount, stateBytes: stateBytes) }

    public func rows() async throws(SyncStorageError) -> [DocumentPage.Row] {
        do throws(StoreError) { return try await documents().map { DocumentPage.Row(id: $0.id, state: $0.state) } } catch { throw SyncStorageError(error) }
    }
}

extension SyncStorageError {
    /// Unavailable or timed out: the peer retries later; anything else is an internal error.
    init(_ error: StoreError) {
        switch error {
        case .unavailable, .timeout: self = .unavailable(error.description)
        default: self = .failed(error.description)
        }
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
