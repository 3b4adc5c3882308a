// BigPeerServer: wiring — configuration, database bootstrap, REST handlers, the WebSocket
// endpoint, lifecycle (start, drain, stop), metrics and logging. No protocol logic lives here.

import Foundation
import Logging
import Migrations
import Postgres
import Sockets

/// Where the database comes from: an operator's URL, or a private cluster we run ourselves.
public enum DatabaseSource: Sendable {
    case url(String)
    case configuration(PostgresConfiguration)
    case local(dataDirectory: String)

    /// `--database-url`, else `DATABASE_URL`, else a local cluster under `dataDirectory`.
    public static func resolve(databaseURL: String?, dataDirectory: String) -> DatabaseSource {
        if let u = databaseURL, !u.isEmpty { return .url(u) }
        if let u = ProcessInfo.processInfo.environment["DATABASE_URL"], !u.isEmpty { return .url(u) }
        return .local(dataDirectory: dataDirectory)
    }
}

/// A ready database: configuration for pools, the local cluster if we started one, and migrations applied.
public struct Database: Sendable {
    public var configuration: PostgresConfiguration
    public var localCluster: LocalPostgres?
    public var migrationReport: PostgresMigrator.Report

    /// Connects (starting a local cluster when asked to), then applies pending migrations: the ones
    /// built into the binary, or those in `migrationsDirectory` (else `BIGPEER_MIGRATIONS`) if given.
    public static func open(_ source: DatabaseSource, migrationsDirectory: String?, loop: EventLoop, logger: Logger) async throws -> Database {
        let configuration: PostgresConfiguration
        var cluster: LocalPostgres?
        switch source {
        case .url(let url):
            configuration = try PostgresConfiguration(url: url)
            logger.info("using database", metadata: ["database": "\(configuration)"])
        case .configuration(let c):
            configuration = c
        case .local(let dir):
            logger.info("no DATABASE_URL given: starting a private PostgreSQL", metadata: ["data-dir": "\(dir)"])
            let local = try await LocalPostgres.start(dataDirectory: dir, loop: loop)
            cluster = local
            configuration = local.configuration()
        }
        let report: PostgresMigrator.Report
        let analysts: AnalystAccess
        do {
            let set = try MigrationSet.resolve(directory: migrationsDirectory)
            if set.origin != MigrationSet.builtIn { logger.notice("migrations from \(set.origin), not the ones built in") }
            let conn = try await PostgresConnection.connect(configuration, on: loop)
            defer { Task { await conn.close() } }
            report = try await PostgresMigrator.apply(set.migrations, on: conn)
            // Advice only: a failed check must not stop a server whose migrations succeeded.
            do { analysts = try await AnalystAccess.check(on: conn) } catch {
                analysts = AnalystAccess(problem: "could not check the read-only role \(LocalPostgres.analystRole): \(error)")
            }
        } catch {
            try? cluster?.stop()  // do not leave a private server running behind a failed start
            throw error
        }
        if !report.applied.isEmpty { logger.info("applied migrations", metadata: ["files": "\(report.applied.joined(separator: ", "))"]) }
        if !report.unknownInDatabase.isEmpty {
            logger.warning("the database has migrations this binary does not know (a newer release ran here)",
                           metadata: ["versions": "\(report.unknownInDatabase)"])
        }
        if let problem = analysts.problem { logger.warning("\(problem)") }
        if let cluster { await announce(cluster, analystsReady: analysts.problem == nil, loop: loop, logger: logger) }
        return Database(configuration: configuration, localCluster: cluster, migrationReport: report)
    }

    /// Prints the private cluster's URL for analysts' tools: the read-only role's, never the
    /// superuser's (whose password stays in its file, for administrators).
    private static func announce(_ cluster: LocalPostgres, analystsReady: Bool, loop: EventLoop, logger: Logger) async {
        var metadata: Logger.Metadata = [
            "cluster": "\(cluster.clusterDirectory)", "reused-running-server": "\(!cluster.startedServer)",
        ]
        do {
            if analystsReady, try await cluster.enableAnalystLogin(loop: loop) {
                metadata["analyst-url"] = "\(cluster.analystURL())"
            }
        } catch {
            logger.warning("could not let the analyst role log in", metadata: ["error": "\(error)"])
        }
        logger.info("local PostgreSQL is up (psql and BI tools: analyst-url, read-only)", metadata: metadata)
    }
}

/// Whether `bigpeer_analyst` (migrations/0009_analyst_role.sql) exists and may read the analytics
/// views in this database. The migration grants nothing when its user could not create the role;
/// this check then says at every start what an administrator has to do.
struct AnalystAccess {
    var problem: String?

    static func check(on conn: PostgresConnection) async throws -> AnalystAccess {
        let role = LocalPostgres.analystRole
        let rows = try await conn.query("""
            SELECT has_schema_privilege(oid, 'analytics', 'USAGE') FROM pg_roles WHERE rolname = \(role)
            """)
        if rows.isEmpty {
            return AnalystAccess(problem: "the read-only role \(role) does not exist (the migrating user may not create roles), "
                + "so analysts have no read-only access: have an administrator run CREATE ROLE \(role) NOLOGIN, then, as this "
                + "database's BigPeer user, GRANT USAGE ON SCHEMA analytics TO \(role); GRANT SELECT ON ALL TABLES IN SCHEMA "
                + "analytics TO \(role); ALTER DEFAULT PRIVILEGES IN SCHEMA analytics GRANT SELECT ON TABLES TO \(role) "
                + "(docs/STORAGE.md, \"Analytics\")")
        }
        if try rows[0].decode(0, as: Bool.self) == false {
            return AnalystAccess(problem: "the read-only role \(role) exists but may not read this database's analytics views: "
                + "as this database's BigPeer user, run GRANT USAGE ON SCHEMA analytics TO \(role); GRANT SELECT ON ALL TABLES "
                + "IN SCHEMA analytics TO \(role); ALTER DEFAULT PRIVILEGES IN SCHEMA analytics GRANT SELECT ON TABLES TO \(role) "
                + "(docs/STORAGE.md, \"Analytics\")")
        }
        return AnalystAccess(problem: nil)
    }
}
