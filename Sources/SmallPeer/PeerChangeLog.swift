// The small peer's change log, as the sync sessions it serves read it (PeerSyncStorage.swift): the
// documents each recent commit changed — local writes, changes downloaded from its own server and
// uploads merged from the peers it serves — in commit order, in memory and bounded.
//
//   commit (HLC c1) ─┐   rows: c1/0 c1/1 │ c2/0 │ c3/0 ...      head: newest commit's txn
//   commit (HLC c2) ─┼─▶ ────────────────┴──────┴────────       from: every commit after it is here
//   commit (HLC c3) ─┘   oldest commits dropped whole past `maxRows` / `maxBytes`
//
// A commit's transaction number is its HLC value (`Commit.clock`, made strictly greater than the
// previous one's by `PeerState.commit`), so numbers only grow, across restarts too: the commit
// records persist the clock, and the log starts empty at open with `from` = `head` = the clock then.
// A session whose checkpoint is older than `from` syncs again (its `have` spares the states it holds).
// Rows are kept from the peer's first `serve` on (`keepsRows`); before, only the numbers advance:
// a peer that never serves pays nothing for the log, and one that starts serving loses nothing (a
// checkpoint from before can only come from an earlier run, whose rows are gone anyway).

import CRDT
import Sync
import SyncProtocol
import Values

struct PeerChangeLog: Sendable {
    struct Row: Sendable {
        var position: ChangeLogPosition
        var document: DocumentRef
        var kind: LogEntry.Kind
        /// The merged delta (nil: the commit took a whole state, which the document's state contains).
        var delta: [UInt8]?
        /// The site of the peer whose change this was (nil: a local write).
        var origin: UInt64?
    }

    private var rows: [Row] = []
    /// Rows before this index are dropped (compacted away in bulk).
    private var start = 0
    private var bytes = 0
    let maxRows: Int
    let maxBytes: Int
    /// The newest commit's transaction.
    private(set) var head: Int64
    /// Every commit after this one is in the log.
    private(set) var from: Int64
    /// Whether commits' rows are kept (from the first session served on).
    var keepsRows = false

    init(head: Int64, maxRows: Int, maxBytes: Int) {
        self.head = head
        self.from = head
        self.maxRows = max(1, maxRows)
        self.maxBytes = max(1, maxBytes)
    }

    var count: Int { rows.count - start }

    static func size(_ row: Row) -> Int { 64 + (row.delta?.count ?? 0) }

    /// Appends one commit's rows as transaction `txn` (above `head`), then drops the oldest
    /// commits, whole, while the log is over its bounds (the newest one always stays). While no
    /// rows are kept, only the numbers move.
    mutating func append(txn: Int64, _ new: [Row]) {
        guard txn > head else { return }
        guard keepsRows, !new.isEmpty else {
            head = txn
            from = txn
            return
        }
        for var row in new {
            row.position.txn = txn
            bytes += Self.size(row)
            rows.append(row)
        }
        head = txn
        while count > maxRows || bytes > maxBytes, rows[start].position.txn != txn {
            let dropped = rows[start].position.txn
            while rows[start].position.txn == dropped {
                bytes -= Self.size(rows[start])
                start += 1
            }
            from = dropped
        }
        if start > 1024, start > rows.count / 2 {
            rows.removeFirst(start)
            start = 0
        }
    }

    /// Whether every commit after `checkpoint` is here. Numbers are sparse (HLC values), so only
    /// those this log can have handed out count: `from`, a commit's, or the one just before a
    /// commit's (a read that ended inside it). A checkpoint another peer handed out — a client
    /// that moved from one peer to another with the same subscription — is then almost never
    /// taken for one of this log's, and its subscription syncs again instead of missing changes.
    func reaches(back checkpoint: Int64) -> Bool {
        guard checkpoint >= from, checkpoint <= head else { return false }
        if checkpoint == from { return true }
        var lo = start, hi = rows.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if rows[mid].position.txn <= checkpoint { lo = mid + 1 } else { hi = mid }
        }
        // `lo`: the first row of a later commit. The checkpoint is the commit before it, or just below it.
        return (lo > start && rows[lo - 1].position.txn == checkpoint) || (lo < rows.count && rows[lo].position.txn - 1 == checkpoint)
    }

    /// The rows after `after`, at most `maxRows` and about `maxBytes` (the first always), and where
    /// the next read starts; nil when the log no longer reaches back to `after`.
    func read(after: ChangeLogPosition, maxRows: Int, maxBytes: Int) -> (rows: ArraySlice<Row>, end: ChangeLogPosition)? {
        guard after.completeThrough >= from else { return nil }
        // First row after `after` (rows are in position order).
        var lo = start, hi = rows.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if rows[mid].position <= after { lo = mid + 1 } else { hi = mid }
        }
        var cut = lo, taken = 0
        while cut < rows.count, cut - lo < max(1, maxRows), taken < maxBytes || cut == lo {
            taken += Self.size(rows[cut])
            cut += 1
        }
        guard cut < rows.count else { return (rows[lo..<cut], max(after, .end(of: head))) }
        // Cut inside the log: the last commit is complete iff the next row starts another.
        let last = rows[cut - 1]
        let end: ChangeLogPosition = rows[cut].position.txn != last.position.txn ? .end(of: last.position.txn) : last.position
        return (rows[lo..<cut], end)
    }
}

extension PeerChangeLog {
    /// The log rows of a commit (numbered in order; the transaction is set by `append`): a row per
    /// merged or replaced document, an upsert while it exists and a delete once it is a tombstone.
    /// Evictions drop only this peer's copy and are not logged (a session would skip them).
    static func rows(_ commit: Commit, _ documents: [(ref: DocumentRef, document: Document?)], origin: UInt64?) -> [Row] {
        guard !commit.documents.isEmpty else { return [] }
        var exists: [DocumentRef: Bool] = [:]
        for (ref, doc) in documents { exists[ref] = doc?.exists ?? false }
        var rows: [Row] = []
        for (ref, op) in commit.documents {
            let delta: [UInt8]?
            switch op {
            case .merge(let d): delta = d.encode()
            case .replace: delta = nil
            case .evict: continue
            }
            rows.append(Row(position: ChangeLogPosition(txn: 0, seq: Int32(clamping: rows.count)), document: ref,
                            kind: exists[ref] == true ? .upsert : .delete, delta: delta, origin: origin))
        }
        return rows
    }
}
