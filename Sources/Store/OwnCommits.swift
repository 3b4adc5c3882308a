import Synchronization
import Values

/// The transactions this instance committed itself, so its change feed can skip reading them
/// back from the change log.
///
/// Every commit notifies every instance, its own included, and each instance's feed reads the new
/// change-log rows. For a commit of its own, with no sync session waiting for rows, that read
/// only tells the instance what it already knows. So the store applies each commit's change-log
/// keys to its read cache right after COMMIT (`recordOwnCommit`) and only then records the
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
    /// The change feed, waiting for `finishing` commits to settle before it reads a range it could
    /// not skip (`DocumentStore.applyOwnCommits(after:through:deferringTo:)`). Called once.
    var waiter: (@Sendable () -> Void)?
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
}

/// What the change feed may do with a notified range (`DocumentStore.applyOwnCommits`).
public enum OwnCommitsOutcome: Sendable, Equatable {
    /// Every transaction of the range was this instance's: applied to the read cache, nothing to read.
    case applied
    /// Not every transaction is recorded yet, but a commit of this instance is settling: the
    /// waiter is called once it (and every other commit then settling) has been recorded or failed.
    case deferred
    /// The range must be read from the change log.
    case mustRead
}

extension DocumentStore {
    /// Keys applied to the read cache per lock hold when recording a commit (a bulk commit's
    /// 100,000 keys would otherwise hold the cache's lock against point reads for milliseconds).
    static let ownCommitKeysPerLock = 4096

    /// This instance committed `txn` with these change-log rows (called after COMMIT, before any
    /// client is answered): applies every row's document to the read cache exactly as a read of
    /// the change log would, then records the number for the feed (`applyOwnCommits`).
    func recordOwnCommit(_ txn: Int64, changes: [WriteTransaction.ChangeRecord]) {
        guard !changes.isEmpty else { return }
        // String ids only: the cache holds no others.
        var keys: [DocumentReadCache.Key] = []
        keys.reserveCapacity(min(changes.count, Self.ownCommitKeysPerLock))
        for c in changes {
            guard case .string(let s) = c.key.id else { continue }
            keys.append(DocumentReadCache.Key(collection: c.key.collection, id: s))
            if keys.count == Self.ownCommitKeysPerLock {
                readCache.invalidate(keys, txn: txn)
                keys.removeAll(keepingCapacity: true)
            }
        }
        if !keys.isEmpty { readCache.invalidate(keys, txn: txn) }
        ownCommits.withLock { $0.record(txn) }
    }

    /// For the change feed: when every transaction in `(after, through]` was committed by this
    /// instance, advances the read cache's `appliedThrough` over them (their changes reached it
    /// at commit) and returns true; the caller may then treat the range as read.
    public func applyOwnCommits(after: Int64, through: Int64) -> Bool {
        applyOwnCommits(after: after, through: through, deferringTo: nil) == .applied
    }

    /// As `applyOwnCommits(after:through:)`, and when the range is not all recorded while a commit
    /// of this instance is settling (COMMIT sent, number not recorded yet), registers `waiter`
    /// instead of telling the feed to read: the notification most likely announced that very
    /// commit, which raced to the LISTEN session ahead of the writer's record (at one client
    /// that was half the commits, each costing a change-log read). The waiter runs once those
    /// commits are recorded or have failed; the feed then skips the range or reads it. A range
    /// that holds another instance's commit is read at most one commit later.
    public func applyOwnCommits(after: Int64, through: Int64, deferringTo waiter: (@Sendable () -> Void)?) -> OwnCommitsOutcome {
        let outcome = ownCommits.withLock { o -> OwnCommitsOutcome in
            if o.take(after: after, through: through) { return .applied }
            guard let waiter, o.finishing > 0 else { return .mustRead }
            o.waiter = waiter
            return .deferred
        }
        if outcome == .applied { readCache.applyChangeLog([], after: after, through: through) }
        return outcome
    }

    /// A commit of this instance is about to be sent (paired with `ownCommitsSettled`).
    func ownCommitSending() {
        ownCommits.withLock { $0.finishing += 1 }
    }

    /// `count` commits announced by `ownCommitSending` were recorded (`recordOwnCommit`) or
    /// failed: wakes the change feed if it deferred a read for them.
    func ownCommitsSettled(_ count: Int) {
        guard count > 0 else { return }
        let waiter = ownCommits.withLock { o -> (@Sendable () -> Void)? in
            o.finishing -= count
            defer { o.waiter = nil }
            return o.waiter
        }
        waiter?()
    }
}
