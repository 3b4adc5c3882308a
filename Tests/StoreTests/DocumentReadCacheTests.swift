import Testing
import TestRandomness
import Values
@testable import Store

@Suite struct DocumentReadCacheTests {
    typealias Key = DocumentReadCache.Key
    let k = Key(collection: "cars", id: "a")

    @Test func missesUntilEnabled() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.insert(k, value: "v1", txn: 5)
        #expect(cache.lookup(k) == nil)
        cache.enable(through: 5)
        cache.insert(k, value: "v1", txn: 5)
        #expect(cache.lookup(k)?.value == "v1")
        cache.disable()
        #expect(cache.lookup(k) == nil)
        #expect(DocumentReadCache(capacityBytes: 0).isEnabled == false)
    }

    @Test func aReadOlderThanTheEnablingPointIsRefused() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 10)
        cache.insert(k, value: "old", txn: 9)
        #expect(cache.lookup(k) == nil)
        #expect(cache.statistics.refusedInserts == 1)
    }

    @Test func aChangeAppliedWhileTheReadWasInFlightRefusesItsValue() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 1)
        // The read saw snapshot 3; meanwhile the feed applied a change of the same document at 4.
        cache.applyChangeLog([(k, 4)], after: 1, through: 4)
        cache.insert(k, value: "seen at 3", txn: 3)
        #expect(cache.lookup(k) == nil)
        // Another document's read at 3 is fine: nothing newer touched it.
        let other = Key(collection: "cars", id: "b")
        cache.insert(other, value: "b at 3", txn: 3)
        #expect(cache.lookup(other)?.value == "b at 3")
        #expect(cache.lookup(other)?.transactionID == 4)
    }

    @Test func invalidationRemovesOnlyOlderEntries() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 1)
        cache.insert(k, value: "at 7", txn: 7)
        cache.invalidate([k], txn: 6)
        #expect(cache.lookup(k)?.value == "at 7")
        cache.invalidate([k], txn: 8)
        #expect(cache.lookup(k) == nil)
        cache.insert(k, value: "at 7 again", txn: 7)  // a slow read from before the write
        #expect(cache.lookup(k) == nil)
        cache.insert(k, value: "at 8", txn: 8)
        #expect(cache.lookup(k)?.value == "at 8")
    }

    @Test func aHitWaitsForTheRequestedTransaction() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 1)
        cache.insert(k, value: "v", txn: 5)
        #expect(cache.lookup(k, minimumTransaction: 5)?.transactionID == 5)
        #expect(cache.lookup(k, minimumTransaction: 6) == nil)
        cache.applyChangeLog([], after: 1, through: 9)
        #expect(cache.lookup(k, minimumTransaction: 9)?.transactionID == 9)
    }

    @Test func aReaderAheadOfTheFeedDoesNotAdvanceIt() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20)
        cache.enable(through: 10)
        // A sync session positioned at 20 reads (20, 30]; (10, 20] is still unread.
        cache.applyChangeLog([], after: 20, through: 30)
        #expect(cache.statistics.appliedThrough == 10)
        cache.applyChangeLog([], after: 10, through: 30)
        #expect(cache.statistics.appliedThrough == 30)
    }

    @Test func forgettingOldChangesRefusesReadsOlderThanThem() {
        let cache = DocumentReadCache(capacityBytes: 1 << 20, recentCapacity: 4)
        cache.enable(through: 1)
        for t in Int64(2)...7 { cache.applyChangeLog([(Key(collection: "c", id: "\(t)"), t)], after: t - 1, through: t) }
        // Changes at 2 and 3 were forgotten: a read at 2 cannot prove that the change at 3 did not
        // touch its key; a read at 3 already includes it.
        cache.insert(k, value: "v", txn: 2)
        #expect(cache.lookup(k) == nil)
        cache.insert(k, value: "v", txn: 3)
        #expect(cache.lookup(k)?.value == "v")
    }

    @Test func evictsToTheBudgetGivingRecentlyHitEntriesASecondChance() {
        let value: Value = .string(String(repeating: "x", count: 1000))
        // ~1.1 KB an entry (JSON text and bookkeeping): 13 fit.
        let cache = DocumentReadCache(capacityBytes: 15_000)
        cache.enable(through: 1)
        let keys = (0..<20).map { Key(collection: "c", id: "\($0)") }
        for key in keys.prefix(8) { cache.insert(key, value: value, txn: 1) }
        #expect(cache.lookup(keys[0]) != nil)  // referenced: survives the next sweep
        for key in keys.suffix(12) { cache.insert(key, value: value, txn: 1) }
        let stats = cache.statistics
        #expect(stats.bytes <= 15_000 && stats.entries >= 12)
        #expect(cache.lookup(keys[0]) != nil)
        #expect(cache.lookup(keys[1]) == nil)  // the oldest unreferenced entry went first
        #expect(cache.lookup(keys[19]) != nil)
    }

    @Test func oversizedValuesAreNotCached() {
        let cache = DocumentReadCache(capacityBytes: 8_000)
        cache.enable(through: 1)
        cache.insert(k, value: .string(String(repeating: "x", count: 2_000)), txn: 1)
        #expect(cache.lookup(k) == nil)
    }

    /// A model of the database and the instance around the cache: commits by this instance
    /// (invalidated at once) and by others (seen when the feed gets to them), reads from
    /// PostgreSQL that take their snapshot, then insert some steps later, and a feed that lags.
    /// Every hit must be the document's value at the transaction the hit claims, and never older
    /// than this instance's own last write of it.
    @Test(arguments: 0..<40) func everyHitIsTheValueAtItsTransaction(seed: Int) {
        var rng = SeededRandom(seed: UInt64(seed))
        let keys = (0..<4).map { Key(collection: "c", id: "k\($0)") }
        let cache = DocumentReadCache(capacityBytes: 1 << 20, recentCapacity: 1 + Int(rng.next() % 8))
        var history: [Key: [(txn: Int64, value: Value)]] = [:]
        var txn: Int64 = 0
        var feedQueue: [(key: Key, txn: Int64)] = []
        var feedPosition: Int64 = 0
        var localWrite: [Key: Int64] = [:]
        var inFlight: [(key: Key, txn: Int64, value: Value)] = []
        func value(_ key: Key, at t: Int64) -> Value {
            history[key, default: []].last(where: { $0.txn <= t })?.value ?? .null
        }
        cache.enable(through: 0)
        for _ in 0..<400 {
            switch rng.next() % 6 {
            case 0, 1:  // a commit, by this instance or another
                txn += 1
                let key = keys[Int(rng.next() % 4)]
                history[key, default: []].append((txn, .int(txn)))
                feedQueue.append((key, txn))
                if rng.next() % 2 == 0 {
                    cache.invalidate([key], txn: txn)
                    localWrite[key] = txn
                }
            case 2:  // the feed catches up part of the way
                let n = Int(rng.next() % UInt64(feedQueue.count + 1))
                let batch = Array(feedQueue.prefix(n))
                feedQueue.removeFirst(n)
                let through = feedQueue.first.map { $0.txn - 1 } ?? txn
                cache.applyChangeLog(batch, after: feedPosition, through: through)
                feedPosition = through
            case 3:  // a read from PostgreSQL takes its snapshot
                let key = keys[Int(rng.next() % 4)]
                inFlight.append((key, txn, value(key, at: txn)))
            case 4:  // a read from PostgreSQL offers its row
                guard !inFlight.isEmpty else { continue }
                let r = inFlight.remove(at: Int(rng.next() % UInt64(inFlight.count)))
                if r.value != .null { cache.insert(r.key, value: r.value, txn: r.txn) }
            default:  // a point read
                let key = keys[Int(rng.next() % 4)]
                guard let hit = cache.lookup(key) else { continue }
                #expect(hit.value == value(key, at: hit.transactionID), "seed \(seed): \(key.id) claims \(hit.transactionID)")
                #expect(hit.transactionID >= localWrite[key] ?? 0, "seed \(seed): own write of \(key.id) not visible")
                #expect(hit.transactionID <= txn)
            }
        }
    }
}

extension DocumentReadCache.Hit: Equatable {
    public static func == (a: Self, b: Self) -> Bool { a.json == b.json && a.transactionID == b.transactionID }
    var value: Value? { try? JSON.parse(json) }
}

extension DocumentReadCache {
    func insert(_ key: Key, value: Value, txn: Int64) { insert(key, json: JSON.serialize(value), txn: txn) }
}
