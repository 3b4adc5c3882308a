import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Postgres
import Testing
import Values

/// Issue #16 item 1: CPU-heavy DQL evaluated in memory (regexp_like, ILIKE) on a server with one
/// event loop. Before: `regexp_like` backtracked and LIKE was O(text × pattern), both on the loop,
/// so two such requests froze every connection (`/healthz` too) until they finished. Now the work
/// leaves the loop once it outgrows a small slice and stops at the statement timeout with 408.
@Suite struct InMemoryEvaluationEndpointTests {
    static let documents = 24
    /// Each document's `s`: just under `regexp_like`'s 64 KiB subject limit, no match anywhere.
    static let subject = String(repeating: "a", count: 60_000) + "b"

    /// WHERE conditions and their `args`, one bomb of each kind.
    static let bombs: [(condition: String, args: String)] = [
        // ~3,600 NFA instructions per scalar: linear, but 24 × 60k × 3.6k steps is far more than 6 s.
        ("regexp_like(s, :p)", #"{"p":"(a|a){1,900}$x"}"#),
        // `_` segments are searched position by position: 24 × 60k × 2k comparisons.
        ("s ILIKE :p", #"{"p":"%\#(String(repeating: "a_", count: 1_000))b%"}"#),
    ]

    /// `bigpeer_in_memory_stages_total{where=place}` of a server started with `--metrics-port`.
    static func stages(_ place: String, _ client: HTTPClient, metricsPort: Int) async throws -> Int {
        let r = try await client.get("http://127.0.0.1:\(metricsPort)/metrics")
        let line = r.text.split(separator: "\n").first { $0.hasPrefix("bigpeer_in_memory_stages_total{where=\"\(place)\"}") }
        return Int(try #require(line?.split(separator: " ").last)) ?? -1
    }

    /// A one-loop server of its own with `documents` documents whose `s` is `subject`.
    static func serverWithDocuments(_ db: TestDatabase, _ arguments: String...) async throws -> ServerProcess {
        let server = try await ServerProcess.start(databaseURL: db.url, extraArguments: ["--insecure-dev"] + arguments)
        let setup = try HTTPClient()
        let insert = #"{"statement":"INSERT INTO c DOCUMENTS (:d)","args":{"d":{"s":"\#(Self.subject)"}}}"#
        for _ in 0..<Self.documents {
            let (code, _) = try await ExecuteEndpointTests.post(setup, server.port, insert)
            #expect(code == 200)
        }
        await setup.shutdown()
        return server
    }

    @Test func bombsTimeOutOffTheLoopWhileHealthzAnswers() async throws {
        try await TestPostgres.withDatabase { db in
            // Its own process (one loop: anything run on it blocks every other connection), so
            // its evaluation threads serve only these bombs, not every test of this process; and a
            // 6 s timeout, so the probes (~0.1 s each) have a wide margin even on a loaded machine.
            let server = try await Self.serverWithDocuments(db, "--statement-timeout", "6")
            let port = server.port

            // Two bombs at once, as in the report, each on its own connection.
            let finished = MutexBox(0)
            let bombs = Self.bombs.map { bomb in
                Task { () throws -> (Int, Value) in
                    let client = try HTTPClient()
                    defer { Task { await client.shutdown() } }
                    let body = #"{"statement":"SELECT * FROM c WHERE \#(bomb.condition)","args":\#(bomb.args)}"#
                    let answer = try await ExecuteEndpointTests.post(client, port, body)
                    finished.withLock { $0 += 1 }
                    return answer
                }
            }
            // Meanwhile the loop answers /healthz and ordinary statements, again and again, each
            // before either bomb has finished (they need the whole 6 s timeout; these need ms).
            // Probes start no later than 3 s in, so that on a loaded machine none is still going
            // when the bombs time out (which would look like a bomb that held the loop).
            let probe = try HTTPClient()
            let probesUntil = ContinuousClock.now + .seconds(3)
            try await Task.sleep(for: .milliseconds(300))
            var rounds = 0
            repeat {
                let health = try await probe.get("http://127.0.0.1:\(port)/healthz")
                #expect(health.status.code == 200)
                let (code, v) = try await ExecuteEndpointTests.post(probe, port, #"{"statement":"SELECT COUNT(*) AS n FROM c"}"#)
                #expect(code == 200 && v["items"] == [["n": .int(Int64(Self.documents))]])
                #expect(finished.withLock { $0 } == 0, "a bomb finished before the probes: it held the loop")
                rounds += 1
                try await Task.sleep(for: .milliseconds(50))
            } while rounds < 5 && ContinuousClock.now < probesUntil

            for bomb in bombs {
                let (code, v) = try await bomb.value
                #expect(code == 408, "\(v)")
                #expect(v["error"]?["description"]?.stringValue?.contains("in-memory evaluation") == true, "\(v)")
            }
            // The same condition in a write: refused as a whole (its step cap, or the timeout of
            // its candidate search), nothing written.
            let update = #"{"statement":"UPDATE c SET hit = true WHERE \#(Self.bombs[0].condition)","args":\#(Self.bombs[0].args)}"#
            let (code, v) = try await ExecuteEndpointTests.post(probe, port, update)
            #expect(code == 408 || code == 400, "\(v)")
            let (_, hits) = try await ExecuteEndpointTests.post(probe, port, #"{"statement":"SELECT COUNT(*) AS n FROM c WHERE hit = true"}"#)
            #expect(hits["items"] == [["n": 0]])
            await probe.shutdown()
            await server.terminate()
        }
    }

    /// A write's own evaluation (here each document's SET value) leaves the loop too. Before, it
    /// ran inline (up to the write cap of 50M steps), and the loop answered nothing else meanwhile.
    @Test func heavyWriteEvaluationLeavesTheLoop() async throws {
        try await TestPostgres.withDatabase { db in
            let metricsPort = try LocalPostgres.freeLoopbackPort()
            let server = try await Self.serverWithDocuments(db, "--metrics-port", String(metricsPort))
            let port = server.port
            let probe = try HTTPClient()
            let offLoopBefore = try await Self.stages("off_loop", probe, metricsPort: metricsPort)
            // No WHERE: the candidate search is a plain scan; the cost is in the SET value, ~10
            // steps per character: 15M steps in all, within the write cap (seconds in a debug build).
            let write = Task { () throws -> (Int, Value) in
                var configuration = HTTPClient.Configuration()
                configuration.requestTimeout = .seconds(300)
                let client = try HTTPClient(configuration: configuration)
                defer { Task { await client.shutdown() } }
                let body = #"{"statement":"UPDATE c SET hit = regexp_like(s, :p)","args":{"p":"(a|a)$x"}}"#
                return try await ExecuteEndpointTests.post(client, port, body)
            }
            // The loop answers while the write evaluates (however long either takes here).
            for _ in 0..<3 {
                let health = try await probe.get("http://127.0.0.1:\(port)/healthz")
                #expect(health.status.code == 200)
                try await Task.sleep(for: .milliseconds(50))
            }
            let (code, v) = try await write.value
            #expect(code == 200, "\(v)")
            // What shows it left the loop, whatever the machine's load: its stages finished off it.
            #expect(try await Self.stages("off_loop", probe, metricsPort: metricsPort) > offLoopBefore, "the write was evaluated on the loop")
            #expect(v["mutatedDocumentIds"]?.arrayValue?.count == Self.documents, "\(v)")
            let (_, hits) = try await ExecuteEndpointTests.post(probe, port, #"{"statement":"SELECT COUNT(*) AS n FROM c WHERE hit = false"}"#)
            #expect(hits["items"] == [["n": .int(Int64(Self.documents))]])
            await probe.shutdown()
            await server.terminate()
        }
    }

    /// Decoding a large result is part of its in-memory stage, charged before it is done: a
    /// 2,000-document `SELECT *` (streamed through a cursor, no WHERE left to memory) is decoded
    /// off the loop, a point read inline. Before, a cursor's batches were decoded on the loop,
    /// outside any budget (the hostile mix: ~9 % of the loops' time went to regex bombs' 1,000-row
    /// results). Counted by `bigpeer_in_memory_stages_total` of the server process.
    @Test func largeResultsAreDecodedOffTheLoop() async throws {
        try await TestPostgres.withDatabase { db in
            let metricsPort = try LocalPostgres.freeLoopbackPort()
            let server = try await ServerProcess.start(databaseURL: db.url, extraArguments: ["--insecure-dev", "--metrics-port", String(metricsPort)])
            let client = try HTTPClient()
            func stages(_ place: String) async throws -> Int { try await Self.stages(place, client, metricsPort: metricsPort) }
            let documents = (0..<2_000).map { "({'_id': 'd\($0)', 'n': \($0)})" }.joined(separator: ", ")
            let (inserted, _) = try await ExecuteEndpointTests.post(client, server.port, #"{"statement":"INSERT INTO big DOCUMENTS \#(documents)"}"#)
            #expect(inserted == 200)

            let offLoopBefore = try await stages("off_loop")
            let (code, v) = try await ExecuteEndpointTests.post(client, server.port, #"{"statement":"SELECT * FROM big"}"#)
            #expect(code == 200 && v["items"]?.arrayValue?.count == 2_000)
            #expect(try await stages("off_loop") > offLoopBefore, "the 2,000-document result was decoded on the loop")

            let (inlineBefore, offLoopBeforePoint) = (try await stages("inline"), try await stages("off_loop"))
            let (point, p) = try await ExecuteEndpointTests.post(client, server.port, #"{"statement":"SELECT * FROM big WHERE _id = 'd7' AND n = 7"}"#)
            #expect(point == 200 && p["items"]?.arrayValue?.count == 1)
            #expect(try await stages("inline") > inlineBefore)
            #expect(try await stages("off_loop") == offLoopBeforePoint)
            await client.shutdown()
            await server.terminate()
        }
    }

    /// A refused pattern is a client error with a readable reason, never a 5xx.
    @Test func unsupportedRegexIsA400() async throws {
        try await InProcessServer.with({ $0.insecureDevelopment = true }) { server in
            let (service, client) = (server.service, server.http)
            _ = try await ExecuteEndpointTests.post(client, service.port, #"{"statement":"INSERT INTO c DOCUMENTS ({'s': 'aa'})"}"#)
            let (code, v) = try await ExecuteEndpointTests.post(client, service.port,
                                                                #"{"statement":"SELECT * FROM c WHERE regexp_like(s, :p)","args":{"p":"(a)\\1"}}"#)
            #expect(code == 400)
            #expect(v["error"]?["description"]?.stringValue?.contains("backreferences are not supported") == true, "\(v)")
        }
    }
}
