import Values
import Synchronization

/// Recently read documents, by collection and string `_id`, so a point read
/// (`SELECT * FROM c WHERE _id = :id`) can be answered without a PostgreSQL round trip.
///
/// ## Why it stays correct
///
/// Every entry is a document's value *as of* a transaction number `txn` (the snapshot of the read
/// that fetched it). It stays valid until some later transaction changes that document. Changes
/// reach the cache only from the instance's change feed (`ChangeFeed`), two ways, and each
/// removes the entry when it is newer than the entry:
///
/// - the change log (`applyChangeLog`): every committed change of every instance, in transaction
///   order; `appliedThrough` is the newest transaction whose changes have all been applied;
/// - this instance's own commits (`invalidate`, from `ChangeFeed.committed`), before they are
///   acknowledged, so a client always reads its own acknowledged writes on the instance that
///   took them.
///
/// A read that misses fetches the row together with its snapshot's transaction number `n`, and
/// races with changes applied while it was in flight. `insert` refuses the value when a change to
/// that document newer than `n` has already been applied — it would be stale and no later change
/// would remove it. To answer that without remembering every change forever, the cache keeps the
/// newest applied change per document for the last `recentCapacity` changes (`recent`), and the
/// newest transaction it has forgotten (`forgottenThrough`): a value read at `n <
/// forgottenThrough` is refused outright.
///
/// What a reader may see: on the instance that wrote, its own writes at once; another instance's
/// writes once this instance's change feed has read them (normally milliseconds; the feed follows
/// NOTIFY). That is the consistency of a replica. A client that needs another instance's write
/// passes its transaction number in `X-DITTO-TXN-ID`: a hit is used only when it reflects at
/// least that transaction (`lookup(minimumTransaction:)`); otherwise the read goes to PostgreSQL.
///
/// The cache is off (`lookup` misses, `insert` ignores) until `enable(through:)`, which the change
/// feed calls when it starts; a store whose feed is not started (tools, tests of the store alone)
/// never caches. Point reads fill it (`insert`); everything that decides what stays valid
/// (`enable`, `disable`, `restart`, `invalidate`, `applyChangeLog`) is the feed's alone.
///
/// Memory: entries (a document's JSON text) are charged their size plus bookkeeping, and evicted
/// in CLOCK order (second chance for entries hit since the hand last passed) once
/// `capacityBytes` is exceeded.
///
/// Thread-safety: all state is behind one `Mutex`; every operation is O(1) amortized and
/// allocation-light, so contention between the event loops stays short.
public final class DocumentReadCache: Sendable {
    /// A collection name and the `_id`'s JSON text, compared byte for byte as PostgreSQL does
    /// (Values/ExactText.swift): synthesized `==` would let "\u{212A}ate" hit "Kate"'s entries
    /// and an NFD `_id` hit the NFC document.
    public struct Key: Hashable, Sendable {
        public var collection: String
        public var id: String
        public init(collection: String, id: String) {
            self.collection = collection
            self.id = id
        }

        public static func == (a: Key, b: Key) -> Bool { a.collection.utf8Equals(b.collection) && a.id.utf8Equals(b.id) }
        public func hash(into hasher: inout Hasher) {
            hasher.combine(collection)  // byte-equal strings hash alike
            hasher.combine(id)
        }
    }

    /// A document's value and the transaction number it reflects.
    public struct Hit: Sendable {
        /// `JSON.serialize` of the document (kept as text only: half the memory of a `Value`
        /// tree, and most responses copy it as it is).
        public var json: [UInt8]
        /// The newest transaction this answer is known to reflect (at least the entry's snapshot).
        public var transactionID: Int64
    }

    struct Entry {
        var json: [UInt8]
        var txn: Int64
        var bytes: Int
        var referenced: Bool
    }

    struct State {
        var enabled = false
        var appliedThrough: Int64 = 0
        var entries: [Key: Entry] = [:]
        /// Insertion order for the CLOCK hand (keys may be stale: removed entries are skipped).
        var clock: [Key] = []
        var hand = 0
        var bytes = 0
        /// Newest applied change per document, for the last `recentCapacity` changes.
        var recent: [Key: Int64] = [:]
        var recentOrder: [(key: Key, txn: Int64)] = []
        var recentHead = 0
        var forgottenThrough: Int64 = 0
        var hits = 0
        var misses = 0
        var refused = 0
    }

    public let capacityBytes: Int
    let recentCapacity: Int
    let state = Mutex(State())

    /// - Parameters:
    ///   - capacityBytes: memory budget for cached values (0 disables the cache).
    ///   - recentCapacity: how many applied changes are remembered for refusing stale inserts.
    public init(capacityBytes: Int, recentCapacity: Int = 65_536) {
        self.capacityBytes = max(0, capacityBytes)
        self.recentCapacity = max(1, recentCapacity)
    }

    /// Starts caching. `through`: every change up to this transaction is already visible to later
    /// reads and every later one will be applied by the change feed.
    func enable(through: Int64) {
        guard capacityBytes > 0 else { return }
        state.withLock { s in
            s.enabled = true
            s.appliedThrough = max(s.appliedThrough, through)
            s.forgottenThrough = max(s.forgottenThrough, through)
        }
    }

    /// Stops caching and drops every entry (e.g. the change feed can no longer vouch for them).
    func disable() {
        state.withLock { s in
            s.enabled = false
            s.entries = [:]
            s.clock = []
            s.hand = 0
            s.bytes = 0
        }
    }

    /// Drops every entry and refuses values read before `through`: the change log was pruned past
    /// what this cache had applied (`ChangeFeed.applyToReadCache`), so changes it never saw may
    /// have made any entry stale, and any read still in flight may be too.
    func restart(through: Int64) {
        state.withLock { s in
            s.entries = [:]
            s.clock = []
            s.hand = 0
            s.bytes = 0
            s.appliedThrough = max(s.appliedThrough, through)
            s.forgottenThrough = max(s.forgottenThrough, through)
        }
    }

    public var isEnabled: Bool { state.withLock { $0.enabled } }

    /// A transaction every applied change is reflected through (`appliedThrough`), for a read that
    /// needs no row (its WHERE folded to FALSE): its empty answer holds at any snapshot, so it
    /// names the newest one this instance vouches for, as a hit does. nil while the cache is off
    /// or has not reached `minimumTransaction`: then PostgreSQL answers.
    public func reflectedTransaction(atLeast minimumTransaction: Int64?) -> Int64? {
        state.withLock { s -> Int64? in
            guard s.enabled, s.appliedThrough >= (minimumTransaction ?? 0) else { return nil }
            return s.appliedThrough
        }
    }

    /// The cached value of `key`, if any and fresh enough for `minimumTransaction`.
    public func lookup(_ key: Key, minimumTransaction: Int64? = nil) -> Hit? {
        state.withLock { s -> Hit? in
            guard s.enabled, var entry = s.entries[key] else {
                s.misses += 1
                return nil
            }
            let reflects = max(entry.txn, s.appliedThrough)
            if let minimumTransaction, reflects < minimumTransaction {
                s.misses += 1
                return nil
            }
            if !entry.referenced {
                entry.referenced = true
                s.entries[key] = entry
            }
            s.hits += 1
            return Hit(json: entry.json, transactionID: reflects)
        }
    }

    /// Offers a document a read fetched at snapshot `txn`, as `JSON.serialize` text; refused when
    /// it may already be stale.
    public func insert(_ key: Key, json: [UInt8], txn: Int64) {
        let bytes = json.count + key.collection.utf8.count + key.id.utf8.count + 128
        state.withLock { s in
            guard s.enabled, bytes <= capacityBytes / 8 else { return }
            if txn < s.forgottenThrough || (s.recent[key] ?? .min) > txn {
                s.refused += 1
                return
            }
            if let old = s.entries[key] {
                guard old.txn < txn else { return }
                s.bytes -= old.bytes
            } else {
                s.clock.append(key)
            }
            s.entries[key] = Entry(json: json, txn: txn, bytes: bytes, referenced: false)
            s.bytes += bytes
            evict(&s)
        }
    }

    /// A change committed in transaction `txn` touched these documents: drop older entries.
    func invalidate(_ keys: some Sequence<Key>, txn: Int64) {
        state.withLock { s in
            for key in keys { apply(key, txn: txn, to: &s) }
        }
    }

    /// The feed read every change in `(after, through]` (or skipped its own commits, whose changes
    /// it applied at commit): apply `changes`, and advance `appliedThrough` when that range
    /// continues it.
    func applyChangeLog(_ changes: [(key: Key, txn: Int64)], after: Int64, through: Int64) {
        state.withLock { s in
            for c in changes { apply(c.key, txn: c.txn, to: &s) }
            if after <= s.appliedThrough { s.appliedThrough = max(s.appliedThrough, through) }
        }
    }

    public struct Statistics: Sendable, Equatable {
        public var entries: Int
        public var bytes: Int
        public var hits: Int
        public var misses: Int
        public var refusedInserts: Int
        public var appliedThrough: Int64
    }

    public var statistics: Statistics {
        state.withLock { s in
            Statistics(entries: s.entries.count, bytes: s.bytes, hits: s.hits, misses: s.misses,
                       refusedInserts: s.refused, appliedThrough: s.appliedThrough)
        }
    }

    // MARK: - Internals (called with the lock held)

    private func apply(_ key: Key, txn: Int64, to s: inout State) {
        if let old = s.entries[key], old.txn < txn {
            s.entries[key] = nil
            s.bytes -= old.bytes
        }
        guard txn > s.forgottenThrough else { return }
        if (s.recent[key] ?? .min) < txn { s.recent[key] = txn }
        // A ring of the last `recentCapacity` changes; the one it overwrites is forgotten.
        if s.recentOrder.count < recentCapacity {
            s.recentOrder.append((key, txn))
        } else {
            let gone = s.recentOrder[s.recentHead]
            if s.recent[gone.key] == gone.txn { s.recent[gone.key] = nil }
            s.forgottenThrough = max(s.forgottenThrough, gone.txn)
            s.recentOrder[s.recentHead] = (key, txn)
            s.recentHead = (s.recentHead + 1) % recentCapacity
        }
    }

    private func evict(_ s: inout State) {
        while s.bytes > capacityBytes, !s.clock.isEmpty {
            if s.hand >= s.clock.count { s.hand = 0 }
            let key = s.clock[s.hand]
            if var entry = s.entries[key] {
                if entry.referenced {
                    entry.referenced = false
                    s.entries[key] = entry
                    s.hand += 1
                    continue
                }
                s.entries[key] = nil
                s.bytes -= entry.bytes
            }
            // Removed (or stale) slot: fill it with the last key so the array stays dense.
            s.clock[s.hand] = s.clock[s.clock.count - 1]
            s.clock.removeLast()
        }
        // Keys of entries removed by invalidation linger in `clock`; compact when they dominate.
        if s.clock.count > 2 * s.entries.count + 1024 {
            s.clock = s.clock.filter { s.entries[$0] != nil }
            s.hand = 0
        }
    }
}
