@testable import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import Migrations
import Postgres
import Sockets
import Store
import Testing
import Values

/// The read-only role for analysts (migrations/0009_analyst_role.sql, docs/STORAGE.md
/// "Analytics"): it reads the analytics views and nothing else, and nobody writes `documents`
/// through a view.
@Suite struct AnalystRoleTests {
    /// Connects as `role` (password login over whatever the test database uses; the local test
    /// cluster's socket trusts every role).
    static func connect(_ db: TestDatabase, as role: String, database: String? = nil) async throws -> PostgresConnection {
        var config = db.configuration
        config["user"] = role
        config["password"] = "pw-\(role)"
        if let database { config["dbname"] = database }
        return try await PostgresConnection.connect(config, on: TestLoops.group.next())
    }

    /// The SQLSTATE `sql` fails with, or nil when it succeeds.
    static func failure(_ conn: PostgresConnection, _ sql: String) async -> String? {
        do {
            _ = try await conn.query(PostgresQuery(unsafeSQL: sql))
            return nil
        } catch let e as PostgresError {
            return e.sqlState ?? "\(e)"
        } catch {
            return "\(error)"
        }
    }

    @Test func analystReadsTheViewsAndCannotWriteReadTablesOrCreate() async throws {
        try await InProcessServer.with { server in
            let (db, service) = (server.database, server.service)
            let admin = try await db.connect()
            let analyst = "t_analyst_" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
            try await afterwards({
                _ = try? await admin.query(PostgresQuery(unsafeSQL: "DROP ROLE IF EXISTS \(analyst)"))
                await admin.close()
            }) {
                _ = try await service.store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', color: 'red'}), ({_id: 'b', color: 'blue'})")
                // How an operator gives a person the role (docs/STORAGE.md).
                _ = try await admin.query(PostgresQuery(unsafeSQL: "CREATE ROLE \(analyst) LOGIN PASSWORD 'pw-\(analyst)' IN ROLE bigpeer_analyst"))
                let conn = try await Self.connect(db, as: analyst)

                // Reads: every view, including one created by a write after the migration ran.
                let rows = try await conn.query("SELECT _id, value->>'color' FROM analytics.cars ORDER BY _id")
                #expect(try rows.map { try $0.decode(0, as: String.self) + "=" + $0.decode(1, as: String.self) } == ["a=red", "b=blue"])
                #expect(try await conn.query("SELECT count(*) FROM analytics.all_documents")[0].decode(0, as: Int.self) == 2)

                // No writes through the views: refused as not updatable (55000) before privileges are
                // even looked at, and the role holds no write privilege anyway.
                for sql in ["UPDATE analytics.cars SET value = '{}'", "DELETE FROM analytics.cars",
                            "INSERT INTO analytics.cars (_id, value) VALUES ('c', '{}')",
                            "UPDATE analytics.all_documents SET value = '{}'", "DELETE FROM analytics.all_documents"] {
                    #expect(await Self.failure(conn, sql) == "55000", "\(sql)")
                }
                let writable = try await conn.query("""
                    SELECT count(*) FROM information_schema.role_table_grants
                    WHERE grantee = 'bigpeer_analyst' AND privilege_type <> 'SELECT'
                    """)
                #expect(try writable[0].decode(0, as: Int.self) == 0)
                // Nothing on the tables behind them (CRDT state, change log, keys, settings, attachments).
                for table in ["documents", "change_log", "bigpeer_txn", "api_keys", "bigpeer_settings", "bigpeer_collections",
                              "bigpeer_identity", "bigpeer_attachments", "bigpeer_attachment_chunks", "bigpeer_attachment_refs", "schema_migrations"] {
                    #expect(await Self.failure(conn, "SELECT * FROM \(table) LIMIT 1") == "42501", "\(table)")
                    #expect(await Self.failure(conn, "DELETE FROM \(table)") == "42501", "\(table)")
                    #expect(await Self.failure(conn, "TRUNCATE \(table)") == "42501", "\(table)")
                }
                #expect(await Self.failure(conn, "UPDATE documents SET value = '{}'") == "42501")
                #expect(await Self.failure(conn, "INSERT INTO change_log SELECT * FROM change_log") == "42501")
                #expect(await Self.failure(conn, "SELECT bigpeer_expect_setting('X', NULL)") == "42501")
                // No objects of its own, anywhere.
                for sql in ["CREATE TABLE analytics.mine (a int)", "CREATE VIEW analytics.mine AS SELECT 1",
                            "CREATE TABLE public.mine (a int)", "CREATE TEMPORARY TABLE mine (a int)", "CREATE SCHEMA mine",
                            "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
                            "CREATE INDEX mine ON documents (collection)", "ALTER VIEW analytics.cars RENAME TO mine",
                            "DROP VIEW analytics.cars"] {
                    #expect(await Self.failure(conn, sql) == "42501", "\(sql)")
                }
                await conn.close()

                // Not even the owner writes through a view: none is automatically updatable.
                for sql in ["UPDATE analytics.cars SET value = '{}'", "DELETE FROM analytics.cars",
                            "INSERT INTO analytics.cars (_id, value) VALUES ('c', '{}')", "DELETE FROM analytics.all_documents"] {
                    #expect(await Self.failure(admin, sql) == "55000", "\(sql)")
                }
                let updatable = try await admin.query("""
                    SELECT table_name || ':' || is_updatable || is_insertable_into FROM information_schema.views
                    WHERE table_schema = 'analytics' ORDER BY table_name
                    """)
                #expect(try updatable.map { try $0.decode(0, as: String.self) } == ["all_documents:NONO", "cars:NONO"])
                let read = try await service.store.execute("SELECT _id, color FROM cars ORDER BY _id")
                #expect(read.items == [["_id": "a", "color": "red"], ["_id": "b", "color": "blue"]])
            }
        }
    }

    static func migrate(_ cluster: LocalPostgres, _ database: String, as user: String? = nil) async throws -> AnalystAccess {
        var config = cluster.configuration(database: database)
        if let user { config["user"] = user }
        let conn = try await PostgresConnection.connect(config, on: TestLoops.group.next())
        _ = try await PostgresMigrator.apply(try MigrationSet.embedded(), on: conn)
        let access = try await AnalystAccess.check(on: conn)
        await conn.close()
        return access
    }

    /// Roles belong to the cluster: on a cluster without the role, databases migrating at the same
    /// moment create it once without failing; a user with CREATEROLE (not superuser) creates it; a
    /// user without still migrates, and the start-up check says what an administrator must do.
    @Test func roleCreationIsIdempotentNeedsOnlyCreateRoleAndDegradesWithout() async throws {
        try await TestPostgres.withOwnCluster { cluster, _, _ in
            let loop = TestLoops.group.next()
            let superuser = try await PostgresConnection.connect(cluster.configuration(database: "postgres"), on: loop)
            func connect(_ database: String, as user: String? = nil) async throws -> PostgresConnection {
                var config = cluster.configuration(database: database)
                if let user { config["user"] = user }
                return try await PostgresConnection.connect(config, on: loop)
            }
            func migrate(_ database: String, as user: String? = nil) async throws -> AnalystAccess {
                try await Self.migrate(cluster, database, as: user)
            }
            func roleExists() async throws -> Bool {
                try await !superuser.query("SELECT 1 FROM pg_roles WHERE rolname = 'bigpeer_analyst'").isEmpty
            }

            // 1. Four databases migrate at once on a cluster without the role.
            let racing = (0..<4).map { "race\($0)" }
            for d in racing { _ = try await superuser.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(d)")) }
            try await withThrowingTaskGroup(of: AnalystAccess.self) { group in
                for d in racing { group.addTask { try await Self.migrate(cluster, d) } }
                for try await access in group { #expect(access.problem == nil) }
            }
            #expect(try await roleExists())
            for d in racing { _ = try await superuser.query(PostgresQuery(unsafeSQL: "DROP DATABASE \(d)")) }
            _ = try await superuser.query("DROP ROLE bigpeer_analyst")

            // 2. A user that may not create roles: the migration succeeds, no role, a clear warning.
            _ = try await superuser.query("CREATE ROLE plain LOGIN")
            _ = try await superuser.query("CREATE DATABASE plain_db OWNER plain")
            let withoutRole = try await migrate("plain_db", as: "plain")
            #expect(try await !roleExists())
            #expect(withoutRole.problem?.contains("does not exist") == true)
            #expect(withoutRole.problem?.contains("CREATE ROLE bigpeer_analyst") == true)

            // 3. CREATEROLE without superuser is enough to create it and grant it the views.
            _ = try await superuser.query("CREATE ROLE creator LOGIN CREATEROLE")
            _ = try await superuser.query("CREATE DATABASE creator_db OWNER creator")
            #expect(try await migrate("creator_db", as: "creator").problem == nil)
            #expect(try await roleExists())
            _ = try await superuser.query("CREATE ROLE reader LOGIN IN ROLE bigpeer_analyst")
            let reader = try await connect("creator_db", as: "reader")
            #expect(try await reader.query("SELECT count(*) FROM analytics.all_documents")[0].decode(0, as: Int.self) == 0)
            #expect(await Self.failure(reader, "SELECT * FROM documents") == "42501")
            await reader.close()

            // 4. The database migrated without the role now says what to grant.
            let plain = try await connect("plain_db", as: "plain")
            let access = try await AnalystAccess.check(on: plain)
            #expect(access.problem?.contains("may not read") == true)
            await plain.close()
            await superuser.close()
        }
    }
    /// Views created before migration 0009 (the old, updatable form) are replaced in place by it:
    /// same rows, no longer writable, readable by the role.
    @Test func viewsCreatedBeforeTheMigrationBecomeReadOnly() async throws {
        try await TestPostgres.withDatabase { db in
            let all = try MigrationSet.embedded()
            let conn = try await db.connect()
            _ = try await PostgresMigrator.apply(all.filter { $0.version < 9 }, on: conn)
            // Exactly what registerCollection created until then, for an ordinary and an odd name.
            for name in ["old", "it's \"odd\""] {
                let literal = "'" + name.replacingOccurrences(of: "'", with: "''") + "'"
                _ = try await conn.query("INSERT INTO bigpeer_collections (name) VALUES (\(name))")
                _ = try await conn.query(PostgresQuery(unsafeSQL: """
                    CREATE VIEW analytics.\(PostgresQuery.quoteIdentifier(name)) AS
                    SELECT id #>> '{}' AS _id, value, updated_at FROM documents WHERE collection = \(literal) AND NOT deleted
                    """))
                _ = try await conn.query("""
                    INSERT INTO documents (collection, id, value, state) VALUES (\(name), '"a"'::jsonb, '{"_id": "a"}'::jsonb, '\\x00'::bytea)
                    """)
            }
            // The old form let anyone with UPDATE (its owner here) write documents through it.
            #expect(await Self.failure(conn, "UPDATE analytics.old SET value = value") == nil)

            _ = try await PostgresMigrator.apply(all, on: conn)
            for name in ["old", "it's \"odd\""] {
                let view = "analytics." + PostgresQuery.quoteIdentifier(name)
                #expect(await Self.failure(conn, "UPDATE \(view) SET value = value") == "55000", "\(name)")
                #expect(await Self.failure(conn, "DELETE FROM \(view)") == "55000", "\(name)")
                let rows = try await conn.query(PostgresQuery(unsafeSQL: "SELECT _id FROM \(view)"))
                #expect(try rows.map { try $0.decode(0, as: String.self) } == ["a"], "\(name)")
                let granted = try await conn.query(PostgresQuery(unsafeSQL: "SELECT has_table_privilege('bigpeer_analyst', '\(view.replacingOccurrences(of: "'", with: "''"))', 'SELECT')"))
                #expect(try granted[0].decode(0, as: Bool.self), "\(name)")
            }
            await conn.close()
        }
    }
}
