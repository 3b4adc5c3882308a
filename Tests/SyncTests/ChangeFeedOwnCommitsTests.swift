import BigPeerTestSupport
import CRDT
import Postgres
import Synchronization
import SyncProtocol
import Testing
import Values
@testable import Store
@testable import Sync

/// The change feed skips reading back transactions its own instance committed while no session
/// listens (`ChangeFeed.skipOwnCommits`, `OwnCommits`): it must still never skip another
/// instance's change, keep the read cache exact, and read whenever a session needs the rows.
@Suite struct ChangeFeedOwnCommitsTests {


    static let read = "SELECT * FROM cars WHERE _id = :id"

    @Test func ownCommits_areSkipped_foreignOnesRead_andTheCacheStaysExact() async throws {
        try await withTwoStores { a, b in
            let feed = a.changeFeed
            try await feed.start()
            // Own commit: skipped (the ring restarts empty at it), the cache advanced over it.
            let t1 = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})").transactionID
            await feed.simulateNotification(t1)
            #expect(feed.head == t1)
            #expect(feed.cachedRead(after: .end(of: t1 - 1)) == nil, "not read into the ring")
            #expect(a.readCache.statistics.appliedThrough == t1)
            _ = try await a.execute(Self.read, arguments: ["id": "x"])  // cached now
            // Another instance's commit is read, never skipped; with nobody listening only its keys
            // are read (skimmed): it reaches the cache, not the ring.
            let t2 = try await b.execute("UPDATE cars SET color = 'blue' WHERE _id = 'x'").transactionID
            await feed.simulateNotification(t2)
            #expect(feed.head == t2)
            #expect(feed.cachedRead(after: .end(of: t1)) == nil, "skimmed rows have no values: not in the ring")
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "color": "blue"]])
            // Own, then foreign, announced together: the range is not all own, so it is read.
            let t3 = try await a.execute("UPDATE cars SET color = 'green' WHERE _id = 'x'").transactionID
            let t4 = try await b.execute("UPDATE cars SET color = 'black' WHERE _id = 'x'").transactionID
            #expect(t4 == t3 + 1)
            await feed.simulateNotification(t4)
            #expect(feed.head == t4)
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "color": "black"]])
            #expect(a.readCache.statistics.appliedThrough == t4)
            // With a listener, another instance's commit is read with its values into the ring.
            let token = feed.addListener { _ in }
            let t5 = try await b.execute("UPDATE cars SET color = 'white' WHERE _id = 'x'").transactionID
            await feed.simulateNotification(t5)
            #expect(feed.cachedRead(after: .end(of: t4))?.rows.map(\.txn) == [t5])
            #expect(feed.cachedRead(after: .end(of: t4))?.rows.first?.value?["color"] == "white")
            feed.removeListener(token)
        }
    }

    @Test func aListeningSession_getsOwnCommitsReadIntoTheRing() async throws {
        try await withTwoStores { a, _ in
            let feed = a.changeFeed
            try await feed.start()
            let heads = MutexBox<[Int64]>([])
            let token = feed.addListener { head in heads.withLock { $0.append(head) } }
            let t1 = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})").transactionID
            await feed.simulateNotification(t1)
            #expect(feed.cachedRead(after: .end(of: t1 - 1))?.rows.map(\.id) == ["x"])
            #expect(heads.withLock { $0 } == [t1])
            feed.removeListener(token)
            let t2 = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'y', color: 'red'})").transactionID
            await feed.simulateNotification(t2)
            #expect(feed.head == t2 && feed.cachedRead(after: .end(of: t1)) == nil, "skipped once nobody listens")
            // A session that connects later and starts before the ring reads the database.
            #expect(try await feed.read(after: .end(of: 0)).rows.map(\.txn) == [t1, t2])
        }
    }

    /// An explicit refresh (a reconnect, a retry) must read: a commit of another instance whose
    /// notification was lost lies beyond the announced range.
    @Test func aRequiredRead_isNeverReplacedByASkip() async throws {
        try await withTwoStores { a, b in
            let feed = a.changeFeed
            try await feed.start()
            let t1 = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x'})").transactionID
            let t2 = try await b.execute("INSERT INTO cars DOCUMENTS ({_id: 'y'})").transactionID  // never announced
            feed.noteNotified(t1)
            await feed.refresh()  // what `.reconnected` triggers
            #expect(feed.head == t2)
            #expect(a.readCache.statistics.appliedThrough == t2)
        }
    }

    /// Every write path — a statement, an atomic batch, a sync upload — hands its commit to the
    /// feed before it returns: the cached document is dropped, the number is recorded for the
    /// feed to skip, and nothing is left settling.
    @Test func everyWritePath_handsItsCommitToTheFeed_beforeItReturns() async throws {
        try await withTwoStores { a, _ in
            let feed = a.changeFeed
            try await feed.start()
            var replica = Replica(site: SiteID(77))
            var doc = try Document(id: "x")
            _ = try doc.upsert(["n": 0], replica: &replica)
            _ = try await a.mergeDeltas([MergeItem(collection: "cars", id: "x", delta: doc.delta(since: VersionVector()).encode())], origin: 77)
            let key = DocumentReadCache.Key(collection: "cars", id: "x")
            func cacheX() async throws -> Bool {
                _ = try await a.execute(Self.read, arguments: ["id": "x"])
                return a.readCache.lookup(key) != nil
            }
            #expect(try await cacheX())
            let t1 = try await a.execute("UPDATE cars SET n = 1 WHERE _id = 'x'").transactionID
            #expect(a.readCache.lookup(key) == nil, "statement")
            #expect(try await cacheX())
            let t2 = try await a.executeBatch([(try a.parse("UPDATE cars SET n = 2 WHERE _id = 'x'"), [:])])[0].transactionID
            #expect(a.readCache.lookup(key) == nil, "batch")
            #expect(try await cacheX())
            let merged = doc.versionVector
            _ = try doc.upsert(["n": 3], replica: &replica)
            let t3 = try await a.mergeDeltas([MergeItem(collection: "cars", id: "x", delta: doc.delta(since: merged).encode())], origin: 77).txn
            #expect(a.readCache.lookup(key) == nil, "sync upload")
            for t in [t1, t2, t3] {
                let recorded = feed.state.withLock { $0.own.take(after: t - 1, through: t) }
                #expect(recorded, "transaction \(t) recorded")
            }
            #expect(feed.state.withLock { $0.own.finishing } == 0)
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "n": 3]])
        }
    }

    @Test func ownCommits_coverOnlyRangesOfRecordedTransactions() throws {
        var own = OwnCommits()
        own.record(5)
        own.record(6)
        var taken = own.take(after: 4, through: 7)
        #expect(!taken, "7 is not ours")
        taken = own.take(after: 3, through: 6)
        #expect(!taken, "4 is not ours")
        taken = own.take(after: 4, through: 6)
        #expect(taken)
        taken = own.take(after: 4, through: 6)
        #expect(!taken, "taken once")
        for t in 0..<Int64(OwnCommits.maxTransactions + 10) { own.record(100 + t) }
        taken = own.take(after: 99, through: 100)
        #expect(!taken, "the oldest were dropped at the bound")
        let newest = 100 + Int64(OwnCommits.maxTransactions + 9)
        taken = own.take(after: newest - 1, through: newest)
        #expect(taken)
    }
}
