// BigPeerServer: wiring — configuration, database bootstrap, REST handlers, the WebSocket
// endpoint, lifecycle (start, drain, stop), metrics and logging. No protocol logic lives here.

import Foundation
import Logging
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

    /// Connects (starting a local cluster when asked to), then applies pending migrations.
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
            logger.info("local PostgreSQL is up", metadata: [
                "url": "\(local.url())", "cluster": "\(local.clusterDirectory)",
                "reused-running-server": "\(!local.ownsServer)",
            ])
        }
        let report: PostgresMigrator.Report
        do {
            let migrations = try Migration.load(directory: try MigrationsDirectory.locate(explicit: migrationsDirectory))
            let conn = try await PostgresConnection.connect(configuration, on: loop)
            defer { Task { await conn.close() } }
            report = try await PostgresMigrator.apply(migrations, on: conn)
        } catch {
            try? cluster?.stop()  // do not leave a private server running behind a failed start
            throw error
        }
        if !report.applied.isEmpty { logger.info("applied migrations", metadata: ["files": "\(report.applied.joined(separator: ", "))"]) }
        if !report.unknownInDatabase.isEmpty {
            logger.warning("the database has migrations this binary does not know (a newer release ran here)",
                           metadata: ["versions": "\(report.unknownInDatabase)"])
        }
        return Database(configuration: configuration, localCluster: cluster, migrationReport: report)
    }
}

/// Finds the `migrations/` folder: explicit flag, `BIGPEER_MIGRATIONS`, the working directory,
/// beside or above the executable (a source checkout's `.build/…/bigpeer`), or the packaged path.
public enum MigrationsDirectory {
    public static let packaged = "/usr/share/bigpeer/migrations"

    public static func locate(explicit: String?) throws -> String {
        var candidates: [String] = []
        if let explicit { candidates.append(explicit) }
        if let env = ProcessInfo.processInfo.environment["BIGPEER_MIGRATIONS"] { candidates.append(env) }
        candidates.append(FileManager.default.currentDirectoryPath + "/migrations")
        var dir = URL(fileURLWithPath: CommandLine.arguments.first ?? ".").resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<6 {
            candidates.append(dir.appendingPathComponent("migrations").path)
            dir = dir.deletingLastPathComponent()
        }
        candidates.append(packaged)
        for c in candidates where FileManager.default.fileExists(atPath: c + "/0001_settings.sql") { return c }
        if let explicit { throw PostgresError.migration("no migrations found in \(explicit)") }
        throw PostgresError.migration("cannot find the migrations directory (looked in: \(candidates.joined(separator: ", "))); pass --migrations-dir")
    }
}
