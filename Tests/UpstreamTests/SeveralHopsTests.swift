import BigPeerTestSupport
import Foundation
import HTTP
import SmallPeer
import Testing
import Values

/// Several hops (issue #18): cloud ← node B ← node A (A's upstream is itself a local node) and
/// node C on the same cloud. A change made by a small peer on A reaches a small peer on C through
/// B and the cloud, and back; a REST write on the cloud reaches both.
@Suite(.serialized) struct SeveralHopsTests {
    static let messages = "SELECT * FROM messages"

    @Test func aChangeCrossesThreeLevelsAndTwoNodes_andComesBack() async throws {
        try await withDatabases(4) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let b = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.messages], http: http, processes: processes)
            let a = try await Server.start(urls[2], upstreamPort: b.port, subscribe: [Self.messages], http: http, processes: processes)
            let c = try await Server.start(urls[3], upstreamPort: cloud.port, subscribe: [Self.messages], http: http, processes: processes)

            let dir = NSTemporaryDirectory() + "several-hops-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let onA = try SmallPeer(directory: dir + "/a")
            let onC = try SmallPeer(directory: dir + "/c")
            _ = try onA.subscribe(Self.messages)
            _ = try onC.subscribe(Self.messages)
            let clientA = try SyncClient(peer: onA, configuration: SyncClient.Configuration(url: a.syncURL, apiKey: nil))
            let clientC = try SyncClient(peer: onC, configuration: SyncClient.Configuration(url: c.syncURL, apiKey: nil))
            try await clientA.waitUntilCaughtUp(timeout: .seconds(30))
            try await clientC.waitUntilCaughtUp(timeout: .seconds(30))

            func text(_ peer: SmallPeer, _ id: String) -> Value? {
                (try? peer.execute("SELECT * FROM messages WHERE _id = :id", arguments: ["id": .string(id)]).items.first)?["text"] ?? nil
            }
            // A small peer on A writes; the small peer on C sees it (A → B → cloud → C).
            _ = try onA.execute("INSERT INTO messages DOCUMENTS ({'_id': 'm1', 'text': 'from a phone on A'})")
            #expect(await eventually(within: .seconds(30)) { text(onC, "m1") == "from a phone on A" }, "A's write reached C's peer")
            // C's peer answers by editing it; it comes back to A's peer (C → cloud → B → A).
            _ = try onC.execute("UPDATE messages SET text = 'answered on C' WHERE _id = 'm1'")
            #expect(await eventually(within: .seconds(30)) { text(onA, "m1") == "answered on C" }, "C's edit came back to A's peer")
            // A REST write on the cloud reaches both peers.
            try await cloud.execute("INSERT INTO messages DOCUMENTS ({'_id': 'm2', 'text': 'from the cloud'})")
            #expect(await eventually(within: .seconds(30)) { text(onA, "m2") == "from the cloud" && text(onC, "m2") == "from the cloud" })
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, a, b, c], "messages", minimum: 2) })
            await clientA.stop()
            await clientC.stop()
        }
    }
}
