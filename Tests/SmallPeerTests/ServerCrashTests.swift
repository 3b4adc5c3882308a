// A real `bigpeer serve` process is SIGKILLed while a peer is in the middle of its sync (downloading
// thousands of documents, with offline writes of its own to upload). After a restart on the same
// port the peer's client reconnects by itself; in the end the peer and the server hold exactly the
// same documents, none lost, none doubled, and the peer's 40 counter increments count 40 times.
import BigPeerTestSupport
import Foundation
import HTTP
import Postgres
@testable import SmallPeer
import Testing
import Values

@Suite("Server killed mid-sync", .serialized)
struct ServerCrashTests {
    static func rest(_ http: HTTPClient, _ port: Int, _ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        try await RESTClient(http: http, port: port).executeOK(statement, args)
    }

    @Test func serverKilledMidSync_peerResumesWithNoLossAndNoDuplicate() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let port = try LocalPostgres.freeLoopbackPort()
            var server = try await ServerProcess.start(databaseURL: db.url, port: port, extraArguments: ["--insecure-dev"])
            let http = try HTTPClient()
            let blob = String(repeating: "z", count: 2000)
            for batch in 0..<6 {
                var args: [String: Value] = [:]
                for i in 0..<500 { args["d\(i)"] = ["_id": .string("srv-\(batch)-\(i)"), "blob": .string(blob)] }
                _ = try await Self.rest(http, port, "INSERT INTO cars DOCUMENTS " + (0..<500).map { "(:d\($0))" }.joined(separator: ", "), args)
            }

            // Offline work on the peer: new documents and counter increments.
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe("SELECT * FROM cars")
            for i in 0..<100 { _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'peer-\(i)', 'n': \(i)})") }
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'tally'})")
            for _ in 0..<40 { _ = try peer.execute("UPDATE cars APPLY hits INCREMENT BY 1 WHERE _id = 'tally'") }

            var config = SyncClient.Configuration(url: "ws://127.0.0.1:\(port)", apiKey: "insecure-dev")
            config.quietMillis = 400
            config.reconnectBase = .milliseconds(50)
            config.reconnectMax = .milliseconds(500)
            let client = try SyncClient(peer: peer, configuration: config)
            do {
                // Kill while the initial sync is under way (some documents in, not all).
                #expect(await eventually { client.status.receivedEntries > 0 }, "the sync started")
                #expect(client.status.receivedEntries < 3000, "the sync finished before the kill; the test proves less")
                await server.kill()
                server = try await ServerProcess.start(databaseURL: db.url, port: port, extraArguments: ["--insecure-dev"])
                try await client.waitUntilCaughtUp(timeout: .seconds(90))
                #expect(client.status.sessions >= 2)

                let onPeer = try peer.execute("SELECT _id FROM cars ORDER BY _id").items
                let onServer = try await Self.rest(http, port, "SELECT _id FROM cars ORDER BY _id")["items"]
                #expect(onPeer.count == 3000 + 100 + 1)
                #expect(onServer == .array(onPeer), "peer and server differ")
                let tallyPeer = try peer.execute("SELECT hits FROM cars WHERE _id = 'tally'").items
                let tallyServer = try await Self.rest(http, port, "SELECT hits FROM cars WHERE _id = 'tally'")["items"]
                #expect(tallyPeer == [["hits": 40]])
                #expect(tallyServer == [["hits": 40]])
            } catch {
                await client.stop()
                await server.kill()
                throw error
            }
            await client.stop()
            await server.kill()
        }
    }
}
