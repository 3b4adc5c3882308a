import BigPeerTestSupport
import Postgres
import SyncProtocol
import Testing
import Values
@testable import Store

/// Maintenance (`DocumentStore.runMaintenance`): tombstones past TOMBSTONE_TTL_DAYS are reaped,
/// the change log loses whole transactions from its oldest end past CHANGE_LOG_RETENTION_DAYS,
/// one instance at a time. Ages are made by moving timestamps back in SQL.
@Suite struct MaintenanceTests {
    static func count(_ store: DocumentStore, _ sql: PostgresQuery) async throws -> Int64 {
        try await store.pool.query(sql)[0].decode(0, as: Int64.self)
    }

    /// An expired tombstone goes; a recent one stays; one revived by an INSERT after it expired
    /// is a live document again and stays; live documents are untouched. The reaped `_id` can be
    /// created anew.
    @Test func expiredTombstonesAreReaped() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("ALTER SYSTEM SET TOMBSTONE_TTL_DAYS = 2")
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': 'old'}), ({'_id': 'revived'}), ({'_id': 'recent'}), ({'_id': 'live'})")
            _ = try await store.execute("DELETE FROM t WHERE _id IN ['old', 'revived', 'recent']")
            _ = try await store.pool.query("UPDATE documents SET deleted_at = now() - interval '3 days' WHERE id IN ('\"old\"', '\"revived\"')")
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': 'revived', 'back': true})")
            let report = try await store.runMaintenance()
            #expect(report.ran && report.reapedTombstones == 1)
            let rows = try await store.pool.query("SELECT id #>> '{}', deleted FROM documents WHERE collection = 't' ORDER BY 1")
            let left = try rows.map { "\(try $0.decode(0, as: String.self)):\(try $0.decode(1, as: Bool.self))" }
            #expect(left == ["live:false", "recent:true", "revived:false"])
            #expect(try await store.items("SELECT * FROM t WHERE _id = 'revived'") == [["_id": "revived", "back": true]])
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({'_id': 'old', 'again': true})")
            #expect(try await store.items("SELECT * FROM t WHERE _id = 'old'") == [["_id": "old", "again": true]])
            #expect(try await store.runMaintenance().reapedTombstones == 0)
        }
    }

    /// Transactions go whole and oldest first: up to the newest one, among the oldest rows, that
    /// started before the cutoff. The sync resume check then answers "reaches back" only from the
    /// pruned end on.
    @Test func changeLogIsPrunedWholeTransactionsFromTheOldestEnd() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("ALTER SYSTEM SET CHANGE_LOG_RETENTION_DAYS = 1")
            var txns: [Int64] = []
            for i in 0..<5 {
                txns.append(try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a\(i)'}), ({'_id': 'b\(i)'})").transactionID)
            }
            // t0 and t2 started long ago; t1 (between them) is recent but goes with them.
            _ = try await store.pool.query("UPDATE change_log SET created_at = now() - interval '2 days' WHERE txn IN (\(txns[0]), \(txns[2]))")
            let report = try await store.runMaintenance()
            #expect(report.ran && report.prunedThrough == txns[2] && report.prunedChangeLogRows == 6)
            #expect(try await Self.count(store, "SELECT min(txn) FROM change_log") == txns[3])
            #expect(try await Self.count(store, "SELECT count(*) FROM change_log") == 4)
            #expect(try await store.changeLogReaches(back: txns[2]))
            #expect(try await !store.changeLogReaches(back: txns[1]))
            // Documents are not touched by pruning the log.
            #expect(try await store.items("SELECT count(*) AS n FROM c") == [["n": 10]])
            #expect(try await store.runMaintenance().prunedChangeLogRows == 0)
        }
    }

    /// A local node (docs/LOCAL-NODE.md): what has not been uploaded to the upstream yet stays —
    /// no transaction after the upload position is pruned, and no tombstone written since the
    /// oldest of those transactions began is reaped, however old. Once uploaded, both go.
    @Test func whatWaitsForTheUpstreamIsNeitherPrunedNorReaped() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("ALTER SYSTEM SET TOMBSTONE_TTL_DAYS = 1")
            _ = try await store.execute("ALTER SYSTEM SET CHANGE_LOG_RETENTION_DAYS = 1")
            let uploaded = try await store.execute("INSERT INTO u DOCUMENTS ({'_id': 'up'}), ({'_id': 'gone-up'})").transactionID
            _ = try await store.upstreamRecord("ws://cloud.example/api/v4/sync")
            try await store.saveUploadPosition("ws://cloud.example/api/v4/sync", .end(of: uploaded))
            let deleted = try await store.execute("DELETE FROM u WHERE _id = 'gone-up'").transactionID
            _ = try await store.execute("INSERT INTO u DOCUMENTS ({'_id': 'later'})")
            // Everything is old now.
            _ = try await store.pool.query("UPDATE change_log SET created_at = created_at - interval '3 days'")
            _ = try await store.pool.query("UPDATE documents SET deleted_at = deleted_at - interval '3 days' WHERE deleted")
            var report = try await store.runMaintenance()
            #expect(report.prunedThrough == uploaded && report.reapedTombstones == 0, "\(report)")
            #expect(try await Self.count(store, "SELECT min(txn) FROM change_log") == deleted)
            #expect(try await Self.count(store, "SELECT count(*) FROM documents WHERE deleted") == 1)
            // A position inside the deletion's transaction, or before its first row, covers none of it.
            for inside in [ChangeLogPosition(txn: deleted, seq: -1), ChangeLogPosition(txn: deleted, seq: 0)] {
                try await store.saveUploadPosition("ws://cloud.example/api/v4/sync", inside)
                report = try await store.runMaintenance()
                #expect(report.reapedTombstones == 0 && (report.prunedThrough ?? 0) < deleted, "\(inside): \(report)")
                #expect(try await Self.count(store, "SELECT min(txn) FROM change_log") == deleted)
            }
            // Uploaded: the deletion may go now.
            try await store.saveUploadPosition("ws://cloud.example/api/v4/sync", .end(of: deleted + 1))
            report = try await store.runMaintenance()
            #expect(report.reapedTombstones == 1 && report.prunedThrough == deleted + 1, "\(report)")
        }
    }

    /// With the maintenance lock held elsewhere (another instance running it), a run does nothing.
    @Test func oneInstanceAtATime() async throws {
        try await withStore { store, db in
            let other = try await db.connect()
            defer { Task { await other.close() } }
            _ = try await other.query("SELECT pg_advisory_lock(\(DocumentStore.maintenanceLock))")
            #expect(try await store.runMaintenance() == MaintenanceReport(ran: false))
            _ = try await other.query("SELECT pg_advisory_unlock(\(DocumentStore.maintenanceLock))")
            #expect(try await store.runMaintenance().ran)
        }
    }

    /// The settings: defaults shown by SHOW, whole days from 1 to 36,500 only.
    @Test func settingsAreValidated() async throws {
        try await withStore { store, _ in
            #expect(try await store.items("SHOW TOMBSTONE_TTL_DAYS") == [["name": "TOMBSTONE_TTL_DAYS", "value": 30]])
            #expect(try await store.items("SHOW CHANGE_LOG_RETENTION_DAYS") == [["name": "CHANGE_LOG_RETENTION_DAYS", "value": 30]])
            for bad in ["0", "36501", "'7'", "1.5", "true"] {
                await #expect(throws: StoreError.self, "\(bad)") { _ = try await store.execute("ALTER SYSTEM SET TOMBSTONE_TTL_DAYS = \(bad)") }
            }
            _ = try await store.execute("ALTER SYSTEM SET CHANGE_LOG_RETENTION_DAYS = 7")
            #expect(try await store.items("SHOW CHANGE_LOG_RETENTION_DAYS") == [["name": "CHANGE_LOG_RETENTION_DAYS", "value": 7]])
        }
    }

    /// A reader whose next transactions were pruned before it read them (an instance suspended
    /// past the retention) cannot vouch for anything it cached: its read cache starts over, and a
    /// value read before the gap is refused.
    @Test func aReadCachePrunedPastStartsOver() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let store = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20)
            let before = try await store.execute("INSERT INTO r DOCUMENTS ({'_id': 'x', 'v': 1})").transactionID
            try await store.changeFeed.start()  // caches from `before` on
            store.readCache.insert(.init(collection: "r", id: "x"), json: Array(#"{"_id":"x","v":1}"#.utf8), txn: before)
            #expect(store.readCache.statistics.entries == 1)
            // Another instance changes x, and maintenance prunes that transaction before this
            // instance has read it.
            let changed = try await store.pool.query("""
                WITH t AS (UPDATE bigpeer_txn SET n = n + 1 RETURNING n)
                INSERT INTO change_log (txn, seq, collection, id, kind) SELECT n, 0, 'r', '"x"', 'upsert' FROM t RETURNING txn
                """)[0].decode(0, as: Int64.self)
            _ = try await store.pool.query("DELETE FROM change_log WHERE txn = \(changed)")
            let page = try await store.changeFeed.readChangeLog(after: .end(of: before))
            #expect(page.rows.isEmpty && page.end.completeThrough == changed)
            #expect(store.readCache.statistics.entries == 1, "only the feed's own reads reach the cache")
            await store.changeFeed.refresh()  // what a notification or a reconnect triggers
            #expect(store.changeFeed.head == changed)
            #expect(store.readCache.statistics.entries == 0)
            store.readCache.insert(.init(collection: "r", id: "x"), json: Array(#"{"_id":"x","v":1}"#.utf8), txn: before)
            #expect(store.readCache.statistics.entries == 0)  // read before the gap: refused
        }
    }
}
