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
        guard ownCommits.withLock({ $0.take(after: after, through: through) }) else { return false }
        readCache.applyChangeLog([], after: after, through: through)
        return true
    }
}
