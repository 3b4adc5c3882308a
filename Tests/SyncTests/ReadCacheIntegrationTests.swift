import BigPeerTestSupport
import Postgres
import Sockets
import Testing
import Values
import DQL
@testable import Store
@testable import Sync

/// The point-read cache with real change feeds: two instances (store, feed, listener) on one
/// database, as `bigpeer serve` wires them.
@Suite struct ReadCacheIntegrationTests {
    struct Instance {
        var store: DocumentStore
        var feed: ChangeFeed
        var listener: PostgresListener
        var follower: Task<Void, Never>
    }

    func withInstances(_ body: (Instance, Instance) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            var instances: [Instance] = []
            for _ in 0..<2 {
                let store = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20)
                let listener = try await PostgresListener(db.configuration, channels: [ChangeFeed.channel], loop: TestLoops.group.next())
                let feed = store.changeFeed
                try await feed.start()
                instances.append(Instance(store: store, feed: feed, listener: listener, follower: Task { await feed.follow(listener) }))
            }
            try await body(instances[0], instances[1])
            for i in instances {
                i.follower.cancel()
                await i.listener.stop()
            }
        }
    }

    static let read = "SELECT * FROM cars WHERE _id = :id"

    func color(_ store: DocumentStore, minimumTransaction: Int64? = nil) async throws -> (Value?, Int64) {
        let r = try await store.execute(Self.read, arguments: ["id": "c1"], minimumTransaction: minimumTransaction)
        return (r.items.first?["color"], r.transactionID)
    }

    @Test func repeatedPointReadsAreServedFromMemoryWithTheSameAnswer() async throws {
        try await withInstances { a, _ in
            let t = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})").transactionID
            let first = try await color(a.store)
            let hitsBefore = a.store.readCache.statistics.hits
            let second = try await color(a.store)
            #expect(first.0 == "red" && second.0 == "red")
            #expect(second.1 >= t)
            #expect(a.store.readCache.statistics.hits == hitsBefore + 1)
            // Other shapes never use the cache.
            #expect(DocumentStore.pointReadKey(try select("SELECT color FROM cars WHERE _id = :id"), arguments: ["id": "c1"]) == nil)
            #expect(DocumentStore.pointReadKey(try select("SELECT * FROM cars WHERE _id = :id"), arguments: ["id": 1]) == nil)
            #expect(DocumentStore.pointReadKey(try select("SELECT * FROM cars WHERE 'c1' = _id"), arguments: [:])?.id == "c1")
        }
    }

    @Test func aReadWhoseConditionFoldsFalse_asksPostgreSQLNothing() async throws {
        try await withInstances { a, _ in
            let t = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})").transactionID
            // The feed has applied the insert (else its late NOTIFY would meet the closed pool).
            while a.store.readCache.statistics.appliedThrough < t { try await Task.sleep(for: .milliseconds(5)) }
            let bomb: [String: Value] = ["s": .string(String(repeating: "a", count: 25) + "b"), "p": "^(a|a)*$"]
            // With PostgreSQL out of reach, only an answer that never asks it can come back.
            await a.store.pool.shutdown()
            await #expect(throws: (any Error).self) { _ = try await a.store.execute("SELECT * FROM cars WHERE color = 'red'") }
            let none = try await a.store.execute("SELECT * FROM cars WHERE regexp_like(:s, :p)", arguments: bomb)
            #expect(none.items.isEmpty)
            #expect(none.transactionID == a.store.readCache.statistics.appliedThrough && none.transactionID >= t)
            let count = try await a.store.execute("SELECT COUNT(*) AS n FROM cars WHERE color = NULL")
            #expect(count.items == [["n": 0]])
            let aggregate = try await a.store.execute("SELECT MAX(color) AS m, COUNT(*) AS n FROM cars WHERE regexp_like(:s, :p) AND color = 'red'",
                                                      arguments: bomb)
            #expect(aggregate.items == [["m": .null, "n": 0]])
            // A client that asks for a transaction this instance has not applied yet still goes
            // to PostgreSQL (and here fails).
            await #expect(throws: (any Error).self) {
                _ = try await a.store.execute("SELECT * FROM cars WHERE regexp_like(:s, :p)", arguments: bomb, minimumTransaction: t + 1_000)
            }
        }
    }

    @Test func ownWritesAreReadBackAtOnce() async throws {
        try await withInstances { a, _ in
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})")
            _ = try await color(a.store)
            _ = try await color(a.store)  // cached now
            for (i, c) in ["green", "blue", "black"].enumerated() {
                let t = try await a.store.execute("UPDATE cars SET color = :c WHERE _id = 'c1'", arguments: ["c": .string(c)]).transactionID
                let (got, at) = try await color(a.store)
                #expect(got == .string(c), "update \(i)")
                #expect(at >= t)
            }
            _ = try await a.store.execute("DELETE FROM cars WHERE _id = 'c1'")
            #expect(try await color(a.store).0 == nil)
        }
    }

    @Test func anotherInstancesWriteIsSeenAfterItsFeedAndAtOnceWithTheTransactionHeader() async throws {
        try await withInstances { a, b in
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})")
            _ = try await color(b.store)
            _ = try await color(b.store)  // b has it cached
            let t1 = try await a.store.execute("UPDATE cars SET color = 'green' WHERE _id = 'c1'").transactionID
            // Green once b's feed has read the change (milliseconds): only the feed removes b's red.
            #expect(try await eventually { try await color(b.store).0 == "green" })
            #expect(b.feed.head >= t1)
            _ = try await color(b.store)  // cached again, green
            // With X-DITTO-TXN-ID: never the cached green once a has written blue, feed or no feed.
            let t2 = try await a.store.execute("UPDATE cars SET color = 'blue' WHERE _id = 'c1'").transactionID
            let (got, at) = try await color(b.store, minimumTransaction: t2)
            #expect(got == "blue")
            #expect(at >= t2)
            let hits = b.store.readCache.statistics.hits
            #expect(try await color(b.store).0 == "blue")
            #expect(b.store.readCache.statistics.hits == hits + 1)
        }
    }

    /// While an instance's LISTEN session is down it would not hear of other instances' writes, so
    /// its cache is dropped and switched off until the feed has caught up after the reconnect.
    @Test func aBrokenListenerDropsTheCacheUntilTheFeedHasCaughtUp() async throws {
        try await withInstances { a, b in
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})")
            _ = try await color(b.store)
            _ = try await color(b.store)
            #expect(b.store.readCache.statistics.entries == 1)
            let listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            func listeners() async throws -> Int64 { try await b.store.pool.query(PostgresQuery(unsafeSQL: listening))[0].decode(0, as: Int64.self) }
            #expect(try await listeners() == 2)
            _ = try await b.store.pool.query(PostgresQuery(unsafeSQL: """
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()
                """))
            // b notices (its listener waits 250 ms before reconnecting): the cache is off and empty.
            #expect(await eventually { !b.store.readCache.isEnabled })
            #expect(b.store.readCache.statistics.entries == 0)
            // A write elsewhere in the database during the outage; then b reconnects and catches up.
            let t = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c2', 'color': 'grey'})").transactionID
            #expect(try await eventually { try await listeners() == 2 && b.store.readCache.isEnabled && b.feed.head >= t })
            #expect(try await color(b.store).0 == "red")
            let hits = b.store.readCache.statistics.hits
            #expect(try await color(b.store).0 == "red")
            #expect(b.store.readCache.statistics.hits == hits + 1)  // and caching again
        }
    }

    @Test func uploadsFromSmallPeersInvalidateToo() async throws {
        try await withInstances { a, _ in
            _ = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})")
            _ = try await color(a.store)
            _ = try await color(a.store)
            // A delta as a small peer would upload it: the document's state after a local edit.
            // A write elsewhere in the database during the outage (not c1: only the disconnect may drop c1).
            let t = try await a.store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c2', 'color': 'grey'})").transactionID
            let doc = try #require(try await a.store.fetchDocuments([(collection: "cars", id: "c1")]).first)
            _ = try await a.store.execute("UPDATE cars SET color = 'white' WHERE _id = 'c1'")
            _ = try await color(a.store)  // cached: white
            let merged = try await a.store.mergeDeltas([MergeItem(collection: "cars", id: "c1", delta: doc.state)], origin: 1)
            #expect(merged.txn > t)
            // Merging an older state changes nothing visible, but the read must come from the new row.
            let (got, at) = try await color(a.store)
            #expect(got == "white")
            #expect(at >= merged.txn)
        }
    }

    func select(_ text: String) throws -> SelectStatement {
        guard case .select(let s) = try DQL.parse(text) else { throw ReadCacheTestFailure() }
        return s
    }
}

struct ReadCacheTestFailure: Error {}
