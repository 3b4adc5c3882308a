// One initial-sync page as read from PostgreSQL and not yet decoded (`readSyncPage`).
//
//   readSyncPage ──► SyncPageRead { nextAfter, isLast, txn, stateBytes }   (known at once: the
//        │                                                                 next read can start)
//        └──────────► .documents()  ──► [StoredDocument]                   (binary columns read,
//                                                                           residual filter run)

import DQL
import Postgres
import Values

/// A page of a subscription's documents, read but not decoded. Where the page ends (`nextAfter`,
/// `isLast`) and how large it is are known as soon as the query returns, so a session can ask
/// for the next page while this one is decoded and sent.
public struct SyncPageRead: Sendable {
    let result: PostgresResult
    /// Rows read (before the in-memory filter).
    public let rowCount: Int
    let collection: String
    /// The part of the WHERE clause PostgreSQL could not run (nil: all of it ran there).
    let filter: SelectQuery?
    /// The last id the store looked at (the next page starts after it), or the request's `after`
    /// for an empty page.
    public let nextAfter: Value?
    /// The snapshot (transaction number) the page was read at.
    public let txn: Int64
    /// No documents remain after this page.
    public let isLast: Bool
    /// The states' total size in bytes (before the in-memory filter), for the caller's budget.
    public let stateBytes: Int

    /// Decodes the page's documents in id order (full states; the value only when a residual
    /// filter needed it), dropping those the in-memory part of the WHERE clause rejects.
    public func documents() throws(StoreError) -> [StoredDocument] {
        var rows: [StoredDocument] = []
        rows.reserveCapacity(rowCount)
        do {
            for i in 0..<rowCount {
                let row = result[i]
                let id = try BinaryColumns.json(row, column: 1)
                // The value is parsed only when part of the WHERE runs in memory: a fully pushed-down
                // subscription (the usual case) costs no JSON parse per row.
                var value: Value? = nil
                if let filter {
                    let v = try BinaryColumns.json(row, column: 3)
                    guard try filter.matches(v) else { continue }
                    value = v
                }
                rows.append(StoredDocument(collection: collection, id: id, state: try BinaryColumns.bytes(row, column: 2), value: value))
            }
        } catch {
            throw StoreError.from(error)
        }
        return rows
    }
}
