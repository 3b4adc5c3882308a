import Synchronization
import Values

/// The transactions this instance committed itself, with the documents each changed, so its
/// change feed can skip reading them back from the change log.
///
/// Every commit notifies every instance, its own included, and each instance's feed reads the new
/// change-log rows. For a commit of its own, with no sync session waiting for rows, that read
/// only tells the instance what it already knows: its read cache was told of every change before
/// the client was answered. So the store records its commits here (after COMMIT), and the feed
/// takes a range of transaction numbers from here instead of reading it — only a range made
/// entirely of this instance's commits: the numbers have no gaps (docs/STORAGE.md), so such a
/// range holds no other instance's change. Anything not recorded (a race with the notification,
/// a large transaction, an entry dropped at the bound) is simply read as before.
struct OwnCommits: Sendable {
    /// Transaction number -> the read-cache keys of its change-log rows.
    private var byTransaction: [Int64: [DocumentReadCache.Key]] = [:]
    /// Bounds: transactions kept, and change-log rows per recorded transaction.
    static let maxTransactions = 4096
    static let maxChanges = 1000

    mutating func record(_ txn: Int64, keys: [DocumentReadCache.Key]) {
        // At the bound, drop the older half in one pass (not the oldest entry with a scan on every
        // commit, which is what happens while sessions listen and the feed takes nothing).
        // Dropping is always safe: what is not recorded is read from the change log.
        if byTransaction.count >= Self.maxTransactions {
            let keepFrom = txn - Int64(Self.maxTransactions / 2)
            byTransaction = byTransaction.filter { $0.key >= keepFrom }
        }
        byTransaction[txn] = keys
    }

    /// The keys of every transaction in `(after, through]` with their numbers, when each one is
    /// recorded; nil otherwise. Forgets everything up to `through` either way when it succeeds,
    /// and everything up to `after` always (the feed is past it).
    mutating func take(after: Int64, through: Int64) -> [(key: DocumentReadCache.Key, txn: Int64)]? {
        if byTransaction.keys.contains(where: { $0 <= after }) { byTransaction = byTransaction.filter { $0.key > after } }
        guard through > after, through - after <= Int64(byTransaction.count) else { return nil }
        var out: [(key: DocumentReadCache.Key, txn: Int64)] = []
        for txn in (after + 1)...through {
            guard let keys = byTransaction[txn] else { return nil }
            for key in keys { out.append((key, txn)) }
        }
        for txn in (after + 1)...through { byTransaction[txn] = nil }
        return out
    }
}

extension DocumentStore {
    /// This instance committed `txn` with these change-log rows (called after COMMIT).
    func recordOwnCommit(_ txn: Int64, changes: [WriteTransaction.ChangeRecord]) {
        guard !changes.isEmpty, changes.count <= OwnCommits.maxChanges else { return }
        // Every row's document (string ids only: the cache holds no others; a non-string id's
        // row still counts, so the range is covered).
        let keys = changes.compactMap { c -> DocumentReadCache.Key? in
            if case .string(let s) = c.key.id { DocumentReadCache.Key(collection: c.key.collection, id: s) } else { nil }
        }
        ownCommits.withLock { $0.record(txn, keys: keys) }
    }

    /// For the change feed: when every transaction in `(after, through]` was committed by this
    /// instance, applies their changes to the read cache (advancing its `appliedThrough` as a
    /// change-log read would) and returns true; the caller may then treat the range as read.
    public func applyOwnCommits(after: Int64, through: Int64) -> Bool {
        guard let changes = ownCommits.withLock({ $0.take(after: after, through: through) }) else { return false }
        readCache.applyChangeLog(changes, after: after, through: through)
        return true
    }
}
