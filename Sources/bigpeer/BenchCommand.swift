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

/// Round trips through our libpq layer, shaped like `pgbench` so the two compare directly.
///
/// Each client does what a pgbench client does for the same script and `-M` mode, one statement
/// at a time on its own session, and like pgbench never reads the returned values (the result is
/// received in full and freed):
///
/// | `--query` / `--protocol` | statement sent                                             | pgbench equivalent                     |
/// |---|---|---|
/// | point / simple           | `SELECT abalance … WHERE aid = 1234` (Query message)       | `pgbench -S -M simple`                 |
/// | point / extended         | `… WHERE aid = $1`, unnamed Parse/Bind/Describe/Execute/Sync | `pgbench -S -M extended`             |
/// | point / prepared         | named statement prepared once, then Bind/Describe/Execute/Sync | `pgbench -S -M prepared`           |
/// | select1 / (same three)   | `SELECT 1`                                                 | `pgbench -f select1.sql -M …`          |
///
/// `aid` is uniform in 1…100000·scale from a per-client SplitMix64 (pgbench also draws from a
/// userspace PRNG; Swift's default generator would add a `getrandom` system call per statement).
struct PostgresBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "postgres",
        abstract: "Statements per second through the Postgres module (SELECT 1, or pgbench's point select).")

    enum WireProtocol: String, ExpressibleByArgument, CaseIterable {
        case simple, extended, prepared
    }

    @Option(name: .customLong("database-url")) var databaseURL: String
    @Option var clients = 1
    @Option var seconds = 10
    @Option(help: "select1 | point (needs `pgbench -i` tables)") var query = "point"
    @Option(name: .customLong("protocol"), help: "simple | extended | prepared, as pgbench -M.") var mode = WireProtocol.extended
    @Flag(help: "Same as --protocol prepared (kept for older scripts).") var prepared = false
    @Option(help: "pgbench scale factor of the database (rows = 100000 * scale).") var scale = 1
    @Option(help: "Event loop threads.") var threads = 2

    func validate() throws {
        guard query == "select1" || query == "point" else { throw ValidationError("--query must be select1 or point") }
        guard clients >= 1, seconds >= 1, scale >= 1, threads >= 1 else { throw ValidationError("counts must be positive") }
    }

    func run() async throws {
        let group = try EventLoopGroup(threads: threads)
        var poolConfig = PostgresPool.Configuration()
        poolConfig.maxConnections = clients
        let pool = PostgresPool(try PostgresConfiguration(url: databaseURL), configuration: poolConfig, group: group)
        let deadline = ContinuousClock.now + .seconds(seconds)
        let total = Counter()
        let rows = UInt64(100_000 * scale)
        let mode = prepared ? .prepared : self.mode
        let select1 = query == "select1"
        try await withThrowingTaskGroup(of: Void.self) { g in
            for i in 0..<clients {
                // Each client task runs on a loop (as HTTP handlers do), so its session lives there too.
                g.addTask(executorPreference: group.loops[i % group.loops.count]) {
                    try await pool.withConnection { conn in
                        var random = SplitMix64(seed: UInt64(i) &* 0x9E37_79B9_7F4A_7C15 &+ 1)
                        var n = 0
                        while ContinuousClock.now < deadline {
                            let aid = Int(random.next() % rows) + 1
                            switch mode {
                            case .simple:
                                _ = try await conn.simpleQuery(
                                    unsafeSQL: select1 ? "SELECT 1" : "SELECT abalance FROM pgbench_accounts WHERE aid = \(aid)")
                            case .extended, .prepared:
                                var q: PostgresQuery = select1
                                    ? "SELECT 1"
                                    : "SELECT abalance FROM pgbench_accounts WHERE aid = \(aid)"
                                q.prepared = mode == .prepared
                                _ = try await conn.query(q)
                            }
                            n += 1
                        }
                        total.value.add(n, ordering: .relaxed)
                    }
                }
            }
            try await g.waitForAll()
        }
        let tps = Double(total.value.load(ordering: .relaxed)) / Double(seconds)
        print("tps = \(Int(tps)) (clients=\(clients), query=\(query), protocol=\(mode.rawValue))")
        await pool.shutdown()
        group.shutdown()
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny userspace generator for the benchmark's keys.
/// (TestRandomness.SeededRandom is the same algorithm, but that module is for tests and is not
/// linked into the product.)
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A shared counter the benchmark's tasks add to.
final class Counter: Sendable {
    let value = Atomic<Int>(0)
}
