// A seeded simulation through the `bigpeer peer` binary and a real server on real PostgreSQL:
// eight small peers edit a handful of documents offline (upserts, field updates, MAP keys,
// counters, DELETE and re-INSERT of the same `_id`, INITIAL documents; sometimes REST writes on
// the server too), and every round a random subset runs `--sync-once` at the same time. Every
// `--sync-once` must end caught up, and at the end every peer and the server hold identical values.
//
// Issue #16 item 13: such runs hung (`not caught up in time: still receiving`, now with what it
// waits for: a `want` for a tombstone the server never answered) or diverged (a peer kept a
// document the server had deleted). Before the fix, of seeds 1-48: 20 and 26 hung; 2, 5, 6, 19,
// 21 and 27 diverged; 21 only in some runs (group commit put three peers' uploads of one document
// into one transaction). The fixed seeds are those; two seeds drawn at random per run are added
// (printed with the list and in every failure). `BIGPEER_SIM_SEEDS=1,2,3` runs other seeds and
// `BIGPEER_SIM_CONCURRENCY` how many at once (default 4; 10 seeds take 35-70 s on the shared
// 2-core machine; the 5-minute time limit allows sweeps of about 70 seeds per run: beyond it the
// children are killed and report exit 137). After the fix, seeds 1-100 pass.
import BigPeerTestSupport
import Foundation
@testable import SmallPeer
import TestRandomness
import Testing
import Values

@Suite("bigpeer peer sync simulation", .serialized)
struct CLISyncSimulationTests {
    static let peers = 8
    static let rounds = 5
    static let ids = (0..<6).map { "d\($0)" }
    /// Seeds always run: each failed before the fix (see the file comment).
    static let fixedSeeds: [UInt64] = [2, 5, 6, 19, 20, 21, 26, 27]
    /// Seeds run at the same time against one server (each on its own collection).
    static var concurrentSeeds: Int { ProcessInfo.processInfo.environment["BIGPEER_SIM_CONCURRENCY"].flatMap { Int($0) } ?? 4 }

    static var seeds: [UInt64] {
        if let list = ProcessInfo.processInfo.environment["BIGPEER_SIM_SEEDS"] {
            return list.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        }
        return fixedSeeds + (0..<2).map { _ in UInt64.random(in: 1000...UInt64(UInt32.max)) }
    }

    @Test(.timeLimit(.minutes(5)))
    func eightCLIPeers_randomOfflineEdits_syncOnceInRandomSubsets_converge() async throws {
        let seeds = Self.seeds
        print("CLISyncSimulation seeds: \(seeds.map(String.init).joined(separator: ","))")
        try await TestServer.with { server in
            // Every seed runs to its end (a failing seed does not stop the others), so one run
            // reports every failing seed.
            var next = 0
            var failures: [String] = []
            await withTaskGroup(of: String?.self) { group in
                func startNext() {
                    guard next < seeds.count else { return }
                    let seed = seeds[next]
                    next += 1
                    group.addTask {
                        var simulation = Simulation(seed: seed, server: server)
                        do { try await simulation.run() } catch { return "\(error)" }
                        return nil
                    }
                }
                for _ in 0..<Self.concurrentSeeds { startNext() }
                while let result = await group.next() {
                    if let failure = result { failures.append(failure) }
                    startNext()
                }
            }
            for f in failures { Issue.record(Comment(rawValue: f)) }
        }
    }
}

/// One seed's run: its own collection, its own peer directories, on a shared server.
struct Simulation {
    let seed: UInt64
    let server: TestServer
    let collection: String
    var rng: SeededRandom
    let dirs: [TempDirectory]
    /// Every command run, for the failure message.
    var transcript: [String] = []

    init(seed: UInt64, server: TestServer) {
        self.seed = seed
        self.server = server
        collection = "c\(seed)"
        rng = SeededRandom(seed: seed)
        dirs = (0..<CLISyncSimulationTests.peers).map { TempDirectory("sim\(seed)p\($0)") }
    }

    var subscription: String { "SELECT * FROM COLLECTION \(collection) (n COUNTER)" }

    /// One random local edit (a statement or two) for peer `p`, as DQL text (the CLI has no binds).
    mutating func randomEdit(peer p: Int) -> [String] {
        let c = collection
        let id = CLISyncSimulationTests.ids[rng.below(CLISyncSimulationTests.ids.count)]
        let v = rng.below(1000)
        let key = "p\(p)"
        switch rng.below(9) {
        case 0, 1:
            return ["INSERT INTO COLLECTION \(c) (tags MAP) DOCUMENTS ({'_id': '\(id)', 'v': \(v), 'tags': {'\(key)': \(v)}}) ON ID CONFLICT DO UPDATE"]
        case 2:
            return ["UPDATE \(c) SET v = \(v) WHERE _id = '\(id)'"]
        case 3:
            return ["UPDATE COLLECTION \(c) (tags MAP) SET tags.\(key) = \(v) WHERE _id = '\(id)'"]
        case 4, 5:
            return ["UPDATE COLLECTION \(c) (n COUNTER) APPLY n INCREMENT BY \(rng.below(5) + 1) WHERE _id = '\(id)'"]
        case 6:
            return ["DELETE FROM \(c) WHERE _id = '\(id)'"]
        case 7:
            return ["DELETE FROM \(c) WHERE _id = '\(id)'",
                    "INSERT INTO COLLECTION \(c) (tags MAP) DOCUMENTS ({'_id': '\(id)', 'v': \(v), 'tags': {'\(key)': \(v)}}) ON ID CONFLICT DO UPDATE"]
        default:
            return ["INSERT INTO COLLECTION \(c) (tags MAP) INITIAL DOCUMENTS ({'_id': '\(id)', 'v': 0, 'tags': {'init': \(v)}}) ON ID CONFLICT DO NOTHING"]
        }
    }

    func fail(_ what: String) -> TestFailure {
        TestFailure("seed \(seed) (BIGPEER_SIM_SEEDS=\(seed)): \(what)\n--- transcript ---\n" + transcript.suffix(60).joined(separator: "\n"))
    }

    mutating func run() async throws {
        defer { dirs.forEach { $0.cleanup() } }
        for round in 0..<CLISyncSimulationTests.rounds {
            // Offline edits of this round, then the peers chosen to sync run at the same time
            // (their edits first, in the same process: --execute runs before connecting).
            var commands: [(peer: Int, args: [String])] = []
            for p in 0..<CLISyncSimulationTests.peers {
                var statements: [String] = []
                if rng.chance(70) { for _ in 0...rng.below(3) { statements += randomEdit(peer: p) } }
                let syncs = rng.chance(50)
                if !syncs && statements.isEmpty { continue }
                var args = ["--data", dirs[p].path]
                for s in statements { args += ["--execute", s] }
                args += syncs ? syncArguments(p) : ["--offline"]
                commands.append((p, args))
            }
            // Sometimes the server writes too (REST), INITIAL documents included.
            if rng.chance(40) {
                let id = CLISyncSimulationTests.ids[rng.below(CLISyncSimulationTests.ids.count)]
                let statement = rng.chance(50)
                    ? "INSERT INTO COLLECTION \(collection) (tags MAP) INITIAL DOCUMENTS ({'_id': '\(id)', 'v': -1, 'tags': {'srv': 1}}) ON ID CONFLICT DO NOTHING"
                    : "UPDATE COLLECTION \(collection) (n COUNTER) APPLY n INCREMENT BY 10 WHERE _id = '\(id)'"
                transcript.append("round \(round) REST: \(statement)")
                try await server.execute(statement)
            }
            try await runAll(commands, round: round)
        }
        // Everyone syncs twice: the first pass uploads what is left, the second brings the rest.
        for pass in 0..<2 {
            try await runAll((0..<CLISyncSimulationTests.peers).map { ($0, ["--data", dirs[$0].path] + syncArguments($0)) }, round: 100 + pass)
        }
        let rest = try await server.items("SELECT * FROM \(collection) ORDER BY _id")
        for p in 0..<CLISyncSimulationTests.peers {
            let out = try await CLI.run(["--data", dirs[p].path, "--offline", "--execute", "SELECT * FROM \(collection) ORDER BY _id"])
            guard out.status == 0, let items = try CLI.lines(out.out).first?["items"] else {
                throw fail("peer \(p): local SELECT failed: \(out.err)")
            }
            if items != .array(rest) {
                throw fail("peer \(p) differs from the server:\n peer   \(JSON.string(items))\n server \(JSON.string(.array(rest)))")
            }
        }
    }

    func syncArguments(_ p: Int) -> [String] {
        ["--url", server.url, "--key", server.key, "--subscribe", subscription, "--sync-once", "--timeout", "30", "--name", "sim\(seed)p\(p)"]
    }

    /// Runs the commands at the same time; any failure fails the seed with its transcript.
    mutating func runAll(_ commands: [(peer: Int, args: [String])], round: Int) async throws {
        let results = try await withThrowingTaskGroup(of: (Int, [String], TestCommand.Output, Duration).self) { group in
            for (p, args) in commands {
                group.addTask {
                    let start = ContinuousClock.now
                    let out = try await CLI.run(args)
                    return (p, args, out, ContinuousClock.now - start)
                }
            }
            var all: [(Int, [String], TestCommand.Output, Duration)] = []
            for try await r in group { all.append(r) }
            return all.sorted { $0.0 < $1.0 }
        }
        for (p, args, out, took) in results {
            let shown = args.dropFirst(2).filter { !$0.hasPrefix("ws://") && $0 != server.key && $0 != subscription }
            transcript.append("round \(round) peer \(p) [\(out.status), \(took)]: \(shown.joined(separator: " "))"
                              + (out.err.isEmpty ? "" : "\n  stderr: \(out.err)"))
        }
        if let bad = results.first(where: { $0.2.status != 0 }) {
            throw fail("round \(round) peer \(bad.0) exited \(bad.2.status): \(bad.2.err)")
        }
    }
}

enum CLI {
    static func run(_ args: [String]) async throws -> TestCommand.Output {
        try await TestCommand.run(try bigpeerBinary(), ["peer"] + args)
    }

    static func lines(_ text: String) throws -> [Value] {
        try text.split(separator: "\n").map { try JSON.parse(String($0)) }
    }
}
