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
    /// filter needed it), dropping those the in-memory part of the WHERE clause rejects. A
    /// document whose check needs more than `InMemoryEvaluation.subscriptionStepsPerDocument`
    /// steps does not match (as in live matching); a page whose checks add up to more than
    /// a loop's share is decoded off the loop (`InMemoryEvaluation`).
    public func documents() async throws(StoreError) -> [StoredDocument] {
        do {
            guard let filter else { return try decode(filter: nil, page: nil) }
            return try await InMemoryEvaluation.run(deadline: nil) { page in try self.decode(filter: filter, page: page) }
        } catch {
            throw StoreError.from(error)
        }
    }

    func decode(filter: SelectQuery?, page: EvaluationBudget?) throws -> [StoredDocument] {
        var rows: [StoredDocument] = []
        rows.reserveCapacity(rowCount)
        for i in 0..<rowCount {
            let row = result[i]
            let id = try BinaryColumns.json(row, column: 1)
            // The value is parsed only when part of the WHERE runs in memory: a fully pushed-down
            // subscription (the usual case) costs no JSON parse per row.
            var value: Value? = nil
            if let filter {
                try page?.charge(DecodeCost.steps(bytes: row.withRawValue(3) { $0?.count ?? 0 }))
                let v = try BinaryColumns.json(row, column: 3)
                let matched = try InMemoryEvaluation.subscriptionMatches(filter, v)
                try page?.charge(matched.steps)
                guard matched.matches else { continue }
                value = v
            }
            rows.append(StoredDocument(collection: collection, id: id, state: try BinaryColumns.bytes(row, column: 2), value: value))
        }
        return rows
    }
}
