// BigPeerTestSupport: shared test helpers — the PostgreSQL harness (one throwaway cluster per test
// process, a fresh database per test case), a shared event-loop group, free ports.

import Foundation
import Migrations
import Postgres
import Sockets

/// The event loops tests run their connections on (one group per test process).
public enum TestLoops {
    public static let group: EventLoopGroup = {
        do { return try EventLoopGroup(threads: 2) } catch { preconditionFailure("cannot start event loops: \(error)") }
    }()
}

/// PostgreSQL for tests.
///
/// One cluster per test process, started on first use by the same `LocalPostgres` code that
/// `bigpeer serve` uses, under a temporary directory, with a watchdog that stops and deletes it
/// when the process exits. Set `BIGPEER_TEST_DATABASE_URL` to use an existing server instead.
/// Every test case gets its own database, so tests run in parallel without seeing each other.
public enum TestPostgres {
    private actor Holder {
        var task: Task<Server, any Error>?
        func server() async throws -> Server {
            if let task { return try await task.value }
            let t = Task { try await TestPostgres.startServer() }
            task = t
            return try await t.value
        }
    }

    struct Server: Sendable {
        var admin: PostgresConfiguration
        var cluster: LocalPostgres?
    }

    private static let holder = Holder()

    /// The external server `BIGPEER_TEST_DATABASE_URL` names, if any.
    static var externalURL: String? { ProcessInfo.processInfo.environment["BIGPEER_TEST_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 } }

    /// True when tests run against an external server, which has no `LocalPostgres` (`cluster()`
    /// is nil): tests that need the cluster's own superuser or port are then skipped, and say so.
    public static var usesExternalServer: Bool { externalURL != nil }

    static func startServer() async throws -> Server {
        if let url = externalURL {
            return Server(admin: try PostgresConfiguration(url: url), cluster: nil)
        }
        let dir = NSTemporaryDirectory() + "bigpeer-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var options = LocalPostgres.Options()
        options.ephemeral = true
        // One cluster serves every test of the process, run in parallel; tests that start two or
        // three in-process servers (each with its pool) or many CLI peers add up: 400 ran out
        // ("sorry, too many clients already") on a loaded 2-core machine.
        options.maxConnections = 1000
        options.databaseName = "postgres"
        let cluster = try await startCluster(dataDirectory: dir, options: options)
        try cluster.removeWhenProcessExits(alsoRemove: [dir])
        return Server(admin: cluster.configuration(database: "postgres"), cluster: cluster)
    }

    /// The shared test cluster (started on first call).
    public static func cluster() async throws -> LocalPostgres? { try await holder.server().cluster }

    /// Creates a fresh database, runs `body` with it, and drops it afterwards.
    public static func withDatabase<R>(_ body: (TestDatabase) async throws -> R) async throws -> R {
        let server = try await holder.server()
        let name = "t_" + String(UInt64.random(in: 0...UInt64.max), radix: 36)
        let admin: PostgresConnection
        do {
            admin = try await PostgresConnection.connect(server.admin, on: TestLoops.group.next())
        } catch let e as PostgresError {
            // The description hides the server's reason; a test that cannot connect should say it.
            FileHandle.standardError.write(Data("TestPostgres.withDatabase: \(e.debugDescription)\n".utf8))
            throw e
        }
        _ = try await admin.query("CREATE DATABASE \(identifier: name)")
        var config = server.admin
        config["dbname"] = name
        let db = TestDatabase(name: name, configuration: config)
        do {
            let r = try await body(db)
            await db.closePools()
            _ = try? await admin.query("DROP DATABASE \(identifier: name) WITH (FORCE)")
            await admin.close()
            return r
        } catch {
            await db.closePools()
            _ = try? await admin.query("DROP DATABASE \(identifier: name) WITH (FORCE)")
            await admin.close()
            throw error
        }
    }
}

extension TestPostgres {
    /// Runs `body` with a throwaway cluster of its own (for tests that stop or restart PostgreSQL,
    /// which would break the tests sharing the common one), its data directory and options (to
    /// start it again); stops it afterwards and deletes it when the process exits. Starting and
    /// stopping run child processes to completion, so they run off the cooperative pool.
    public static func withOwnCluster<R>(_ body: (LocalPostgres, _ dataDirectory: String, LocalPostgres.Options) async throws -> R) async throws -> R {
        let dir = NSTemporaryDirectory() + "bigpeer-own-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var options = LocalPostgres.Options()
        options.ephemeral = true
        let cluster = try await startCluster(dataDirectory: dir, options: options)
        try cluster.removeWhenProcessExits(alsoRemove: [dir])
        do {
            let result = try await body(cluster, dir, options)
            try? await cluster.stopOffPool()
            return result
        } catch {
            try? await cluster.stopOffPool()
            throw error
        }
    }

    /// `LocalPostgres.start` (initdb and `pg_ctl -w start` run to completion) off the cooperative pool.
    public static func startCluster(dataDirectory: String, options: LocalPostgres.Options) async throws -> LocalPostgres {
        try await OwnThread.runAsync {
            try await LocalPostgres.start(dataDirectory: dataDirectory, options: options, loop: TestLoops.group.next())
        }
    }
}

extension LocalPostgres {
    /// `stop()` (`pg_ctl -w stop`) on a thread of its own.
    public func stopOffPool() async throws { try await OwnThread.run { try self.stop() } }
    /// `restart()` (`pg_ctl -w restart`) on a thread of its own.
    public func restartOffPool() async throws { try await OwnThread.run { try self.restart() } }
}

/// A database of its own for one test case.
public final class TestDatabase: Sendable {
    public let name: String
    public let configuration: PostgresConfiguration
    private let pools = MutexBox<[PostgresPool]>([])

    init(name: String, configuration: PostgresConfiguration) {
        self.name = name
        self.configuration = configuration
    }

    /// A pool on this database; closed when the test's `withDatabase` ends.
    public func makePool(_ configure: (inout PostgresPool.Configuration) -> Void = { _ in }) -> PostgresPool {
        var c = PostgresPool.Configuration()
        configure(&c)
        let pool = PostgresPool(configuration, configuration: c, group: TestLoops.group)
        pools.withLock { $0.append(pool) }
        return pool
    }

    public func connect() async throws -> PostgresConnection {
        try await PostgresConnection.connect(configuration, on: TestLoops.group.next())
    }

    func closePools() async {
        for p in pools.withLock({ $0 }) { await p.shutdown() }
    }
}

extension TestDatabase {
    /// Applies the migrations built into BigPeerServer (the repository's migrations/) to this database.
    public func migrate() async throws {
        let conn = try await connect()
        defer { Task { await conn.close() } }
        _ = try await PostgresMigrator.apply(try MigrationSet.embedded(), on: conn)
    }
}
