import SyncProtocol
import Synchronization
import Values

/// The transactions this instance committed itself, so its change feed can skip reading them
/// back from the change log. Kept in the feed's state (`ChangeFeed.State.own`), under its lock.
///
/// Every commit notifies every instance, its own included, and each instance's feed reads the new
/// change-log rows. For a commit of its own, with no sync session waiting for rows, that read
/// only tells the instance what it already knows. So the feed applies each commit's change-log
/// keys to its read cache right after COMMIT (`ChangeFeed.committed`) and only then records the
/// transaction number here; the feed takes a range of numbers from here instead of reading it —
/// only a range made entirely of this instance's commits: the numbers have no gaps
/// (docs/STORAGE.md), so such a range holds no other instance's change, and every change of it
/// reached the cache before its number could be taken. Any size of transaction is recorded (a
/// bulk INSERT of 100,000 documents is not read back as 100,000 rows with their states). Anything
/// not recorded (a race with the notification, an entry dropped at the bound) is simply read.
struct OwnCommits: Sendable {
    private var transactions: Set<Int64> = []
    /// Commits of this instance between their COMMIT being sent and their number being recorded
    /// (or their failure): a notification that arrives in this window may announce one of them.
    var finishing = 0
    /// The feed deferred a read until a commit of those `finishing` settles (`outcome`); the next
    /// settle wakes it once.
    var deferred = false
    /// Transactions kept (the older half is dropped at the bound).
    static let maxTransactions = 4096

    mutating func record(_ txn: Int64) {
        // At the bound, drop the older half in one pass (not the oldest entry with a scan on every
        // commit, which is what happens while sessions listen and the feed takes nothing).
        // Dropping is always safe: what is not recorded is read from the change log.
        if transactions.count >= Self.maxTransactions {
            let keepFrom = txn - Int64(Self.maxTransactions / 2)
            transactions = transactions.filter { $0 >= keepFrom }
        }
        transactions.insert(txn)
    }

    /// Whether every transaction in `(after, through]` is recorded; if so they are forgotten.
    /// Everything up to `after` is forgotten either way (the feed is past it).
    mutating func take(after: Int64, through: Int64) -> Bool {
        if transactions.contains(where: { $0 <= after }) { transactions = transactions.filter { $0 > after } }
        guard through > after, through - after <= Int64(transactions.count) else { return false }
        for txn in (after + 1)...through where !transactions.contains(txn) { return false }
        for txn in (after + 1)...through { transactions.remove(txn) }
        return true
    }

    /// What the feed may do with the notified range `(after, through]`: skip it when every
    /// transaction of it is recorded (`take`); else, when `mayDefer` and a commit of this
    /// instance is settling (COMMIT sent, number not recorded yet), wait for that commit
    /// instead of reading: the notification most likely announced that very commit, which raced
    /// to the LISTEN session ahead of the writer's record (at one client that was half the
    /// commits, each costing a change-log read). A range that holds another instance's commit is
    /// read at most one commit later.
    mutating func outcome(after: Int64, through: Int64, mayDefer: Bool) -> OwnCommitsOutcome {
        if take(after: after, through: through) { return .applied }
        guard mayDefer, finishing > 0 else { return .mustRead }
        deferred = true
        return .deferred
    }

    /// `count` commits announced as sending were recorded or failed; true when the feed deferred
    /// a read for them (it must look at its range again, once).
    mutating func settled(_ count: Int) -> Bool {
        finishing -= count
        defer { deferred = false }
        return deferred
    }
}

/// What the change feed may do with a notified range (`OwnCommits.outcome`).
enum OwnCommitsOutcome: Sendable, Equatable {
    /// Every transaction of the range was this instance's: applied to the read cache, nothing to read.
    case applied
    /// Not every transaction is recorded yet, but a commit of this instance is settling: the feed
    /// looks again once a settling commit has been recorded or has failed.
    case deferred
    /// The range must be read from the change log.
    case mustRead
}

/// What a write transaction's COMMIT produced: its number and its change-log rows. Handed to the
/// change feed exactly once (`ChangeFeed.committed`), before any client is answered.
struct Committed: Sendable {
    var transaction: Int64
    /// Empty for a transaction that changed nothing (it took no number: `transaction` is then the
    /// newest one, possibly another instance's).
    var changes: [WriteTransaction.ChangeRecord]
}

extension ChangeFeed {
    /// Keys applied to the read cache per lock hold when recording a commit (a bulk commit's
    /// 100,000 keys would otherwise hold the cache's lock against point reads for milliseconds).
    static let ownCommitKeysPerLock = 4096

    /// This instance committed `commit` (called after COMMIT, before any client is answered):
    /// applies every row's document to the read cache exactly as a read of the change log would,
    /// then records the number, so a notification of it can be skipped (`skipOwnCommits`).
    func committed(_ commit: Committed) {
        guard !commit.changes.isEmpty else { return }
        // String ids only: the cache holds no others.
        var keys: [DocumentReadCache.Key] = []
        keys.reserveCapacity(min(commit.changes.count, Self.ownCommitKeysPerLock))
        for c in commit.changes {
            guard case .string(let s) = c.key.id else { continue }
            keys.append(DocumentReadCache.Key(collection: c.key.collection, id: s))
            if keys.count == Self.ownCommitKeysPerLock {
                readCache.invalidate(keys, txn: commit.transaction)
                keys.removeAll(keepingCapacity: true)
            }
        }
        if !keys.isEmpty { readCache.invalidate(keys, txn: commit.transaction) }
        state.withLock { $0.own.record(commit.transaction) }
    }

    /// A commit of this instance is about to be sent (paired with `ownCommitsSettled`).
    func ownCommitSending() {
        state.withLock { $0.own.finishing += 1 }
    }

    /// `count` commits announced by `ownCommitSending` were handed over (`committed`) or failed.
    /// If a read waited for them (`OwnCommitsOutcome.deferred`): skip the notified range if it is
    /// now all this instance's, else read it; a refresh in progress takes it over instead.
    func ownCommitsSettled(_ count: Int) {
        guard count > 0 else { return }
        let read = state.withLock { s -> Bool in
            guard s.own.settled(count) else { return false }
            if s.refreshing {
                s.refreshAgain = true
                return false
            }
            guard skipOwnCommits(&s, mayDefer: false) == .mustRead else { return false }
            return s.notified > s.head || s.readRequired
        }
        announceSkippedHead()
        if read { Task { await self.refresh(readRequired: false) } }
    }

    /// Change-log rows `(after, page.end]` were read by this feed: whatever they touched is stale
    /// in the cache.
    func applyToReadCache(_ page: ChangeLogPage, after position: ChangeLogPosition) {
        guard readCache.isEnabled else { return }
        let after = position.completeThrough, through = page.end.completeThrough
        // Every committed transaction has a change-log row, so a read that finds none for
        // `after + 1` although it covers it was overtaken by maintenance (an instance suspended for
        // longer than CHANGE_LOG_RETENTION_DAYS): the changes it missed are unknown.
        if through > after && (page.rows.first?.txn ?? .max) > after + 1 {
            readCache.restart(through: through)
            return
        }
        readCache.applyChangeLog(page.rows.compactMap { row in
            if case .string(let s) = row.id { (DocumentReadCache.Key(collection: row.collection, id: s), row.txn) } else { nil }
        }, after: after, through: through)
    }
}
