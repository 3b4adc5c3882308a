import BigPeerTestSupport
import Postgres
import Sockets
import Testing
import Values
@testable import Store
@testable import Sync

/// A notification usually reaches the LISTEN session before the writer has recorded its own
/// commit (`recordOwnCommit`): the feed then waits for that commit to settle instead of reading
/// the range back (`OwnCommitsOutcome.deferred`). It must still never lose another instance's
/// change: a range that is not all this instance's is read once the settling commit is recorded
/// or has failed.
@Suite struct ChangeFeedSettlingCommitTests {

    static let read = "SELECT * FROM cars WHERE _id = :id"

    @Test func store_defersOnlyWhileACommitSettles_andWakesTheWaiterOnce() async throws {
        try await withTwoStores { a, b in
            let t1 = try await b.execute("INSERT INTO cars DOCUMENTS ({_id: 'x'})").transactionID
            let calls = MutexBox(0)
            let waiter: @Sendable () -> Void = { calls.withLock { $0 += 1 } }
            // Nothing settling: a range that is not recorded must be read.
            #expect(a.applyOwnCommits(after: t1 - 1, through: t1, deferringTo: waiter) == .mustRead)
            a.ownCommitSending()
            #expect(a.applyOwnCommits(after: t1 - 1, through: t1, deferringTo: nil) == .mustRead, "no waiter: read")
            #expect(a.applyOwnCommits(after: t1 - 1, through: t1, deferringTo: waiter) == .deferred)
            #expect(calls.withLock { $0 } == 0)
            a.ownCommitsSettled(1)
            #expect(calls.withLock { $0 } == 1)
            a.ownCommitSending()
            a.ownCommitsSettled(1)
            #expect(calls.withLock { $0 } == 1, "called once")
            // Recorded: applied, whatever is settling.
            a.ownCommitSending()
            a.recordOwnCommit(t1, changes: [.init(key: DocumentKey(collection: "cars", id: "x"), kind: "upsert", delta: nil)])
            #expect(a.applyOwnCommits(after: t1 - 1, through: t1, deferringTo: waiter) == .applied)
            a.ownCommitsSettled(1)
        }
    }

    /// The race as it happens at one client: the notification of an own commit arrives while the
    /// writer has not recorded it yet. The feed waits, and skips it once recorded: no read.
    @Test func ownCommitNotifiedBeforeItsRecord_isSkippedWithoutARead() async throws {
        try await withTwoStores { a, b in
            let feed = ChangeFeed(store: a)
            try await feed.start()
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})")
            _ = try await a.execute(Self.read, arguments: ["id": "x"])  // cached
            let readsBefore = feed.reads
            // Instance a's commit, stood in for by b's statement: committed, not yet recorded by a.
            a.ownCommitSending()
            let t = try await b.execute("UPDATE cars SET color = 'blue' WHERE _id = 'x'").transactionID
            await feed.simulateNotification(t)
            #expect(feed.head < t, "deferred, not read")
            #expect(feed.reads == readsBefore)
            a.recordOwnCommit(t, changes: [.init(key: DocumentKey(collection: "cars", id: "x"), kind: "upsert", delta: nil)])
            a.ownCommitsSettled(1)
            #expect(feed.head == t, "skipped at once by the settle")
            #expect(feed.reads == readsBefore)
            #expect(a.readCache.statistics.appliedThrough == t)
            #expect(try await a.execute(Self.read, arguments: ["id": "x"]).items == [["_id": "x", "color": "blue"]])
        }
    }

    /// Another instance's commit announced while this instance has a commit settling: deferred
    /// once, then read when the settling commit is done — whether it committed or failed.
    @Test func foreignCommitWhileOwnSettles_isReadAfterTheSettle() async throws {
        try await withTwoStores { a, b in
            let feed = ChangeFeed(store: a)
            try await feed.start()
            _ = try await b.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', color: 'red'})")
            _ = try await a.execute(Self.read, arguments: ["id": "x"])
            for round in 0..<2 {
                let readsBefore = feed.reads
                a.ownCommitSending()  // round 0: it fails (never recorded); round 1: a records a commit of its own
                let t = try await b.execute("UPDATE cars SET color = :c WHERE _id = 'x'", arguments: ["c": .string("c\(round)")]).transactionID
                await feed.simulateNotification(t)
                #expect(feed.head < t)
                // A second notification before the settle does not defer again: it reads.
                if round == 1 {
                    await feed.simulateNotification(t)
                    #expect(feed.head == t, "deferred at most once")
                    #expect(feed.reads == readsBefore + 1)
                }
                a.ownCommitsSettled(1)
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
            let feed = ChangeFeed(store: a)
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
