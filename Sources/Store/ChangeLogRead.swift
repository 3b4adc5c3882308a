// Reading the change log in bounded pages (docs/STORAGE.md "What sync reads and writes").
// Pages start and end at positions (`ChangeLogPosition`, SyncProtocol: a place between two rows).
//
// A page never holds more than `maxRows` rows or (about) `maxBytes` bytes, however large one
// transaction is; it ends at a row (the next read continues after it) or at the end of a
// transaction. `completeThrough` says which transactions a reader has seen entirely: only those
// may be reported as delivered (checkpoints, the feed's head, the read cache's position).

import Postgres
import SyncProtocol
import Values

/// One change-log row joined with the document's current value.
public struct ChangeLogRow: Sendable {
    public var txn: Int64
    /// The row's place in its transaction.
    public var seq: Int32
    public var collection: String
    public var id: Value
    public var kind: String
    public var delta: [UInt8]?
    public var origin: Int64?
    public var value: Value?
    /// The document's full CRDT state when the row was read (nil: the document is gone).
    public var state: [UInt8]?

    public var position: ChangeLogPosition { ChangeLogPosition(txn: txn, seq: seq) }
}

/// One bounded read of the change log.
public struct ChangeLogPage: Sendable {
    /// Rows after the read's start, in (txn, seq) order.
    public var rows: [ChangeLogRow]
    /// Where the next read starts: after the last row, or the end of the newest transaction the
    /// read covered when nothing of it was left out. Never before the read's start.
    public var end: ChangeLogPosition
    /// The read stopped at a bound (rows, bytes, transactions) before the newest committed
    /// transaction: reading on from `end` finds more.
    public var more: Bool
}

/// The change feed reads the change log: for itself (the ring, the read cache) and for sessions
/// that fell behind its ring (`read(after:)`).
extension ChangeFeed {
    /// Default bounds of one change-log read: rows, and bytes of deltas, states and values.
    public static let changeLogPageRows = 1000
    public static let changeLogPageBytes = 8 << 20

    /// Change-log rows after `after`, each with its document's current value and state, in (txn,
    /// seq) order: at most `maxRows` rows, cut where their running size (delta + state + stored
    /// value) passes `maxBytes` (the first row always stays), and none of a transaction after
    /// `after.completeThrough + maxTransactions`. A page may end inside a transaction.
    func readChangeLog(after: ChangeLogPosition, maxTransactions: Int64 = 100,
                              maxRows: Int = changeLogPageRows, maxBytes: Int = changeLogPageBytes)
        async throws(StoreError) -> ChangeLogPage {
        do {
            let upper = after.completeThrough &+ max(1, maxTransactions)
            // One row more than the page holds: `lead(txn)` of the last row kept then tells whether
            // its transaction goes on. The window runs over at most `maxRows + 1` joined rows.
            let fetch = Int64(max(1, maxRows)) + 1
            let bytes = Int64(max(1, maxBytes))
            // The LIMIT applies to change_log alone (the join reads only the page's documents,
            // whatever plan the range gets: with stale statistics right after a bulk commit a
            // custom plan may sort the rest of the range); `n` comes from scalar subqueries, not
            // a LATERAL join whose unanalyzed one-row table the planner counts as 2200 rows (that
            // estimate crossed jit_above_cost: ~150 ms of JIT per page where JIT is on).
            var query: PostgresQuery = """
                SELECT (SELECT n FROM bigpeer_txn), q.txn, q.seq, q.collection, q.id, q.kind, q.delta, q.origin, q.value, q.state, q.next_txn
                FROM (SELECT 1) one LEFT JOIN (
                  SELECT * FROM (
                    SELECT p.*, lead(p.txn) OVER w AS next_txn, row_number() OVER w AS rn,
                           sum(p.bytes) OVER w - p.bytes AS before
                    FROM (
                      SELECT c.*, d.value, d.state,
                             coalesce(octet_length(c.delta), 0) + coalesce(octet_length(d.state), 0)
                               + coalesce(pg_column_size(d.value), 0) AS bytes
                      FROM (SELECT txn, seq, collection, id, kind, delta, origin FROM change_log
                            WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND txn <= least((SELECT n FROM bigpeer_txn), \(upper))
                            ORDER BY txn, seq LIMIT \(fetch)) c
                      LEFT JOIN documents d ON d.collection = c.collection AND d.id = c.id
                    ) p WINDOW w AS (ORDER BY p.txn, p.seq)
                  ) s WHERE s.rn < \(fetch) AND s.before < \(bytes)
                ) q ON true
                ORDER BY q.txn, q.seq
                """
            // Every instance runs this after every commit (its change feed): prepared once per
            // session, PostgreSQL skips parse, analysis and planning of the join each time.
            query.prepared = true
            // Binary columns: states and deltas as their bytes, not hex text of twice their size.
            query.binaryResults = true
            let result = try await pool.query(query)
            let (newest, rows, nextTxn) = try Self.decodeRows(result, withContents: true)
            return Self.page(rows, after: after, newest: newest, upper: upper, nextTxn: nextTxn)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Like `readChangeLog`, but only which documents changed (`txn`, `seq`, `collection`, `id`,
    /// `kind`; no delta, value or state, no join): what the read cache needs when no sync session
    /// does. Rows are ~100 bytes, so the only bound is `maxRows`.
    func skimChangeLog(after: ChangeLogPosition, maxRows: Int = 10 * changeLogPageRows) async throws(StoreError) -> ChangeLogPage {
        do {
            let fetch = Int64(max(1, maxRows)) + 1
            var query: PostgresQuery = """
                SELECT (SELECT n FROM bigpeer_txn), q.txn, q.seq, q.collection, q.id, q.kind, q.next_txn FROM (SELECT 1) one LEFT JOIN (
                  SELECT * FROM (
                    SELECT c.txn, c.seq, c.collection, c.id, c.kind,
                           lead(c.txn) OVER (ORDER BY c.txn, c.seq) AS next_txn, row_number() OVER (ORDER BY c.txn, c.seq) AS rn
                    FROM (SELECT txn, seq, collection, id, kind FROM change_log
                          WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND txn <= (SELECT n FROM bigpeer_txn)
                          ORDER BY txn, seq LIMIT \(fetch)) c
                  ) s WHERE s.rn < \(fetch)
                ) q ON true
                ORDER BY q.txn, q.seq
                """
            query.prepared = true
            query.binaryResults = true
            let result = try await pool.query(query)
            let (newest, rows, nextTxn) = try Self.decodeRows(result, withContents: false)
            return Self.page(rows, after: after, newest: newest, upper: newest, nextTxn: nextTxn)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The rows of a `readChangeLog` (`withContents`: delta, origin, value and state in columns
    /// 6–9, `next_txn` in 10) or `skimChangeLog` (`next_txn` in 6) result, the newest transaction
    /// (column 0), and the transaction of the row after the last one kept. A lone row with NULLs
    /// is an empty page.
    static func decodeRows(_ result: PostgresResult, withContents: Bool) throws -> (newest: Int64, rows: [ChangeLogRow], nextTxn: Int64?) {
        let newest = try BinaryColumns.int64(result[0], column: 0)
        let nextColumn = withContents ? 10 : 6
        var rows: [ChangeLogRow] = []
        rows.reserveCapacity(result.count)
        var nextTxn: Int64? = nil
        for row in result where !row.isNull(1) {
            var r = ChangeLogRow(
                txn: try BinaryColumns.int64(row, column: 1), seq: try BinaryColumns.int32(row, column: 2),
                collection: try BinaryColumns.text(row, column: 3), id: try BinaryColumns.json(row, column: 4),
                kind: try BinaryColumns.text(row, column: 5), delta: nil, origin: nil, value: nil, state: nil)
            // (Not `isNull ? nil : …`: `Value` is nil-literal-expressible, so for the value column
            // that would read SQL NULL as JSON null, `.some(.null)`, instead of no value.)
            if withContents {
                if !row.isNull(6) { r.delta = try BinaryColumns.bytes(row, column: 6) }
                if !row.isNull(7) { r.origin = try BinaryColumns.int64(row, column: 7) }
                if !row.isNull(8) { r.value = try BinaryColumns.json(row, column: 8) }
                if !row.isNull(9) { r.state = try BinaryColumns.bytes(row, column: 9) }
            }
            rows.append(r)
            nextTxn = row.isNull(nextColumn) ? nil : try BinaryColumns.int64(row, column: nextColumn)
        }
        return (newest, rows, nextTxn)
    }

    /// Where a read that started after `after` and returned `rows` ends. `nextTxn` is the
    /// transaction of the row that followed the last one returned (nil: none did, up to `upper`,
    /// the read's last transaction, which the snapshot's newest `newest` bounds).
    static func page(_ rows: [ChangeLogRow], after: ChangeLogPosition, newest: Int64, upper: Int64, nextTxn: Int64?) -> ChangeLogPage {
        let covered = min(newest, upper)
        guard let last = rows.last, let nextTxn else {
            // Every row up to `covered` was returned: the read ends with that transaction (a start
            // beyond the newest transaction, e.g. a position from another database, stays put).
            return ChangeLogPage(rows: rows, end: max(after, .end(of: covered)), more: newest > covered)
        }
        // Cut by the row or byte bound: the last transaction returned is complete iff the row
        // after it belongs to a later one (transactions have no gaps and every one has a row).
        let end = nextTxn > last.txn ? ChangeLogPosition.end(of: last.txn) : last.position
        return ChangeLogPage(rows: rows, end: end, more: true)
    }
}
