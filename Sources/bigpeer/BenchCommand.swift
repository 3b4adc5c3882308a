import ArgumentParser
import Postgres
import Sockets
import Synchronization

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmarks (see Benchmarks/ for the scripts that compare them with references).",
        subcommands: [PostgresBench.self, SyncBench.self])
}

/// Round trips through our libpq layer, shaped like `pgbench -S` so the two compare directly.
struct PostgresBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "postgres",
        abstract: "Statements per second through the Postgres module (SELECT 1, or pgbench's point select).")

    @Option(name: .customLong("database-url")) var databaseURL: String
    @Option var clients = 1
    @Option var seconds = 10
    @Option(help: "select1 | point (needs `pgbench -i` tables)") var query = "point"
    @Flag(help: "Use a prepared statement (like pgbench -M prepared).") var prepared = false
    @Option(help: "pgbench scale factor of the database (rows = 100000 * scale).") var scale = 1
    @Option(help: "Event loop threads.") var threads = 2

    func run() async throws {
        let group = try EventLoopGroup(threads: threads)
        var poolConfig = PostgresPool.Configuration()
        poolConfig.maxConnections = clients
        let pool = PostgresPool(try PostgresConfiguration(url: databaseURL), configuration: poolConfig, group: group)
        let deadline = ContinuousClock.now + .seconds(seconds)
        let total = Counter()
        let rows = 100_000 * scale
        let usePrepared = prepared
        let kind = query
        try await withThrowingTaskGroup(of: Void.self) { g in
            for i in 0..<clients {
                // Each client task runs on a loop (as HTTP handlers do), so its session lives there too.
                g.addTask(executorPreference: group.loops[i % group.loops.count]) {
                    try await pool.withConnection { conn in
                        var n = 0
                        while ContinuousClock.now < deadline {
                            var q: PostgresQuery = kind == "select1"
                                ? "SELECT 1"
                                : "SELECT abalance FROM pgbench_accounts WHERE aid = \(Int.random(in: 1...rows))"
                            q.prepared = usePrepared
                            _ = try await conn.query(q)
                            n += 1
                        }
                        total.value.add(n, ordering: .relaxed)
                    }
                }
            }
            try await g.waitForAll()
        }
        let tps = Double(total.value.load(ordering: .relaxed)) / Double(seconds)
        print("tps = \(Int(tps)) (clients=\(clients), query=\(kind), prepared=\(prepared))")
        await pool.shutdown()
        group.shutdown()
    }
}

/// A shared counter the benchmark's tasks add to.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}
