import BigPeerTestSupport
import Postgres
import Sockets
import Testing
import Values
@testable import Store
@testable import Sync

/// A notification usually reaches the LISTEN session before the writer has handed its own
/// commit to the feed (`ChangeFeed.committed`): the feed then waits for that commit to settle instead of reading
/// the range back (`OwnCommitsOutcome.deferred`). It must still never lose another instance's
/// change: a range that is not all this instance's is read once the settling commit is recorded
/// or has failed.
@Suite struct ChangeFeedSettlingCommitTests {

    static let read = "SELECT * FROM cars WHERE _id = :id"

    @Test func ownCommits_deferOnlyWhileACommitSettles_andWakeTheFeedOnce() {
        var own = OwnCommits()
        // Nothing settling: a range that is not recorded must be read.
        var outcome = own.outcome(after: 0, through: 1, mayDefer: true)
        #expect(outcome == .mustRead)
        own.finishing += 1
        outcome = own.outcome(after: 0, through: 1, mayDefer: false)
        #expect(outcome == .mustRead, "may not defer: read")
        var woken = own.settled(0)
        #expect(!woken, "nothing deferred yet")
        outcome = own.outcome(after: 0, through: 1, mayDefer: true)
        #expect(outcome == .deferred)
        woken = own.settled(1)
        #expect(woken, "the settle wakes the feed")
        own.finishing += 1
        woken = own.settled(1)
        #expect(!woken, "once")
        // Recorded: applied, whatever is settling.
        own.finishing += 1
        own.record(1)
        outcome = own.outcome(after: 0, through: 1, mayDefer: true)
        #expect(outcome == .applied)
        woken = own.settled(1)
        #expect(!woken)
        #expect(own.finishing == 0)
    }

    /// The race as it happens at one client: the notification of an own commit arrives while the
    /// writer has not recorded it yet. The feed waits, and skips it once recorded: no read.
    @Test func ownCommitNotifiedBeforeItsRecord_isSkippedWithoutARead() async throws {
        try await withTwoStores { a, b in
            let feed = a.changeFeed
            try await feed.start()
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})")
            _ = try await a.execute(Self.read, arguments: ["id": "x"])  // cached
            let readsBefore = feed.reads
            // Instance a's commit, stood in for by b's statement: committed, not yet recorded by a.
            a.changeFeed.ownCommitSending()
            let t = try await b.execute("UPDATE cars SET color = 'blue' WHERE _id = 'x'").transactionID
            await feed.simulateNotification(t)
            #expect(feed.head < t, "deferred, not read")
            #expect(feed.reads == readsBefore)
            a.changeFeed.committed(Committed(transaction: t, changes: [.init(key: DocumentKey(collection: "cars", id: "x"), kind: "upsert", delta: nil)]))
            a.changeFeed.ownCommitsSettled(1)
            #expect(feed.head == t, "skipped at once by the settle")
            #expect(feed.reads == readsBefore)
            #expect(a.readCache.statistics.appliedThrough == t)
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "color": "blue"]])
        }
    }

    /// Any database role may NOTIFY the feed's channel (analysts included). A forged, far-ahead
    /// number is read once and then forgotten: own commits are still skipped, not read back.
    @Test func aForgedNotification_doesNotStopOwnCommitsBeingSkipped() async throws {
        try await withTwoStores { a, _ in
            let feed = a.changeFeed
            try await feed.start()
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})")
            await feed.simulateNotification(Int64.max / 2)
            let readsBefore = feed.reads
            let t = try await a.execute("UPDATE cars SET color = 'blue' WHERE _id = 'x'").transactionID
            await feed.simulateNotification(t)
            #expect(feed.head == t)
            #expect(feed.reads == readsBefore, "the own commit was read back instead of skipped")
        }
    }

    /// A head-only listener (the upstream replicator) hears every new head, including one reached
    /// by skipping an own commit, and does not make the feed read that commit back.
    @Test func aHeadListener_hearsSkippedOwnCommits_withoutMakingTheFeedRead() async throws {
        try await withTwoStores { a, _ in
            let feed = a.changeFeed
            try await feed.start()
            let heard = MutexBox<[Int64]>([])
            let token = feed.addHeadListener { h in heard.withLock { $0.append(h) } }
            defer { feed.removeListener(token) }
            let readsBefore = feed.reads
            let t = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'h', color: 'red'})").transactionID
            await feed.simulateNotification(t)
            #expect(feed.head == t)
            #expect(feed.reads == readsBefore, "the own commit was read back for a head listener")
            #expect(heard.withLock { $0 }.last == t, "\(heard.withLock { $0 })")
        }
    }

    /// Another instance's commit announced while this instance has a commit settling: deferred
    /// once, then read when the settling commit is done — whether it committed or failed.
    @Test func foreignCommitWhileOwnSettles_isReadAfterTheSettle() async throws {
        try await withTwoStores { a, b in
            let feed = a.changeFeed
            try await feed.start()
            _ = try await b.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})")
            _ = try await a.execute(Self.read, arguments: ["id": "x"])
            for round in 0..<2 {
                let readsBefore = feed.reads
                a.changeFeed.ownCommitSending()  // round 0: it fails (never recorded); round 1: a records a commit of its own
                let t = try await b.execute("UPDATE cars SET color = :c WHERE _id = 'x'", arguments: ["c": .string("c\(round)")]).transactionID
                await feed.simulateNotification(t)
                #expect(feed.head < t)
                // A second notification before the settle does not defer again: it reads.
                if round == 1 {
                    await feed.simulateNotification(t)
                    #expect(feed.head == t, "deferred at most once")
                    #expect(feed.reads == readsBefore + 1)
                }
                a.changeFeed.ownCommitsSettled(1)
                #expect(await eventually { feed.head == t })  // the read after a settle runs in a task
                #expect(feed.reads == readsBefore + 1)
                #expect(a.readCache.statistics.appliedThrough == t)
                #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "color": .string("c\(round)")]])
            }
        }
    }

    /// Real writes on both instances, the feed following a real LISTEN session: every commit of
    /// either instance reaches a's read cache, and a's own commits are mostly not read back.
    @Test func interleavedWritesOfTwoInstances_allReachTheCache() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let a = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20)
            let b = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20)
            let listener = try await PostgresListener(db.configuration, channels: [ChangeFeed.channel], loop: TestLoops.group.next())
            let feed = a.changeFeed
            try await feed.start()
            let following = Task { await feed.follow(listener) }
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', n: 0})")
            var last: Int64 = 0
            for i in 1...40 {
                let writer = i % 5 == 0 ? b : a
                last = try await writer.execute("UPDATE cars SET n = n + 1 WHERE _id = 'x'").transactionID
                // A read on a between writes caches the value; b's changes must invalidate it.
                let r = try await a.execute(Self.read, arguments: ["id": "x"], minimumTransaction: last)
                #expect(r.items == [["_id": "x", "n": .int(Int64(i))]])
            }
            #expect(await eventually { feed.head == last })
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "n": 40]])
            #expect(feed.reads < 40, "a's own commits are not all read back (\(feed.reads) reads)")
            following.cancel()
            await listener.stop()
        }
    }
}
