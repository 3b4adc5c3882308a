import BigPeerTestSupport
import Foundation
import Testing
@testable import Postgres

@Suite struct PostgresMigratorTests {
    let migrations = [
        Migration(version: 1, name: "0001_a.sql", sql: "CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a VALUES (1);"),
        Migration(version: 2, name: "0002_b.sql", sql: "CREATE TABLE b (id int); INSERT INTO b SELECT id FROM a;"),
    ]

    @Test func concurrentRunnersApplyEachMigrationExactlyOnce() async throws {
        try await TestPostgres.withDatabase { db in
            let pool = db.makePool()
            let reports = try await withThrowingTaskGroup(of: PostgresMigrator.Report.self) { g in
                for _ in 0..<2 { g.addTask { try await PostgresMigrator.apply(migrations, pool: pool) } }
                return try await g.reduce(into: []) { $0.append($1) }
            }
            #expect(reports.map(\.applied.count).sorted() == [0, 2])
            #expect(try await pool.query("SELECT count(*) FROM b")[0].decode(0, as: Int.self) == 1)
            #expect(try await pool.query("SELECT count(*) FROM schema_migrations")[0].decode(0, as: Int.self) == 2)
            let again = try await PostgresMigrator.apply(migrations, pool: pool)
            #expect(again.applied.isEmpty)
            #expect(again.alreadyApplied == ["0001_a.sql", "0002_b.sql"])
        }
    }

    @Test func anEditedAppliedMigrationIsRefused() async throws {
        try await TestPostgres.withDatabase { db in
            let pool = db.makePool()
            _ = try await PostgresMigrator.apply(migrations, pool: pool)
            var edited = migrations
            edited[0].sql += "\n-- edited"
            await #expect {
                _ = try await PostgresMigrator.apply(edited, pool: pool)
            } throws: { e in
                guard case PostgresError.migration(let m) = e else { return false }
                return m.contains("0001_a.sql was changed after it was applied")
            }
        }
    }

    @Test func aFailingMigrationRollsBackAndNamesTheFile() async throws {
        try await TestPostgres.withDatabase { db in
            let pool = db.makePool()
            let bad = migrations + [Migration(version: 3, name: "0003_bad.sql", sql: "CREATE TABLE c (id int); SELECT nope;")]
            await #expect {
                _ = try await PostgresMigrator.apply(bad, pool: pool)
            } throws: { e in
                guard case PostgresError.migration(let m) = e else { return false }
                return m.hasPrefix("0003_bad.sql") && m.contains("42703")
            }
            let c = try await pool.query("SELECT to_regclass('c') IS NULL")[0].decode(0, as: Bool.self)
            #expect(c)  // the failed file left nothing behind
            #expect(try await pool.query("SELECT count(*) FROM schema_migrations")[0].decode(0, as: Int.self) == 2)
        }
    }

    @Test func loadReadsNumberedFilesInOrderAndRejectsBadNames() throws {
        let dir = NSTemporaryDirectory() + "mig-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try "SELECT 2;".write(toFile: dir + "/0002_two.sql", atomically: true, encoding: .utf8)
        try "SELECT 1;".write(toFile: dir + "/0001_one.sql", atomically: true, encoding: .utf8)
        try "notes".write(toFile: dir + "/README.md", atomically: true, encoding: .utf8)
        let loaded = try Migration.load(directory: dir)
        #expect(loaded.map(\.version) == [1, 2])
        try "x".write(toFile: dir + "/oops.sql", atomically: true, encoding: .utf8)
        #expect(throws: PostgresError.self) { _ = try Migration.load(directory: dir) }
    }
}
