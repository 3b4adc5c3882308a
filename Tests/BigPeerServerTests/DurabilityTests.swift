import BigPeerTestSupport
import HTTP
import Postgres
import Testing
import Values

/// Nothing acknowledged may be lost: a real `bigpeer serve` process is SIGKILLed while clients write
/// as fast as they can; after a restart every acknowledged write is there exactly once.
@Suite struct DurabilityTests {
    @Test func acknowledgedWritesSurviveSIGKILL() async throws {
        try await TestPostgres.withDatabase { db in
            let server = try await ServerProcess.start(databaseURL: db.url, extraArguments: ["--insecure-dev"])
            let port = server.port
            let acknowledgedInserts = MutexBox<[String]>([])
            let acknowledgedIncrements = MutexBox(0)
            let attemptedIncrements = MutexBox(0)
            let client = try HTTPClient()
            _ = try await client.execute(Self.request(port, #"{"statement":"INSERT INTO c DOCUMENTS ({_id: 'k', n: 0})"}"#))

            await withTaskGroup(of: Void.self) { g in
                for w in 0..<8 {
                    g.addTask {
                        var i = 0
                        while true {
                            i += 1
                            let id = "w\(w)-\(i)"
                            let insert = #"{"statement":"INSERT INTO d DOCUMENTS ({_id: '\#(id)', w: \#(w), i: \#(i)})"}"#
                            guard let r = try? await client.execute(Self.request(port, insert)) else { return }
                            if r.status.code == 200 { acknowledgedInserts.withLock { $0.append(id) } } else { return }
                            attemptedIncrements.withLock { $0 += 1 }
                            let inc = #"{"statement":"UPDATE COLLECTION c (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k'"}"#
                            guard let r2 = try? await client.execute(Self.request(port, inc)), r2.status.code == 200 else { return }
                            acknowledgedIncrements.withLock { $0 += 1 }
                        }
                    }
                }
                g.addTask {
                    // Kill once real load has been acknowledged (not after a fixed time: CI machines vary).
                    _ = await eventually(within: .seconds(60)) { acknowledgedInserts.withLock { $0.count } >= 100 }
                    await server.kill()
                }
            }
            await client.shutdown()
            let acked = acknowledgedInserts.withLock { $0 }
            #expect(acked.count >= 100)  // the load really ran before the kill

            let restarted = try await ServerProcess.start(databaseURL: db.url, extraArguments: ["--insecure-dev"])
            let check = try HTTPClient()
            let all = try await check.execute(Self.request(restarted.port, #"{"statement":"SELECT _id FROM d"}"#))
            let items = try JSON.parse(all.body)["items"]?.arrayValue ?? []
            let stored = items.compactMap { $0["_id"]?.stringValue }
            #expect(Set(stored).count == stored.count)  // exactly once
            let missing = Set(acked).subtracting(stored)
            #expect(missing.isEmpty, "acknowledged but lost: \(missing.prefix(5))")

            let counter = try await check.execute(Self.request(restarted.port, #"{"statement":"SELECT n FROM c"}"#))
            let n = try JSON.parse(counter.body)["items"]?.arrayValue?.first?["n"]?.int64Value ?? -1
            let (ackInc, tried) = (acknowledgedIncrements.withLock { $0 }, attemptedIncrements.withLock { $0 })
            #expect(Int(n) >= ackInc && Int(n) <= tried, "counter \(n), acknowledged \(ackInc), attempted \(tried)")
            await check.shutdown()
            await restarted.terminate()
        }
    }

    static func request(_ port: Int, _ body: String) -> HTTPClientRequest {
        HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(port)/api/v4/store/execute",
                          headers: ["Content-Type": "application/json"], body: Array(body.utf8))
    }
}
