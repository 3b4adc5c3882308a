import BigPeerTestSupport
import Foundation
import HTTP
import SmallPeer
import Testing
import Values

/// `--upstream-relay-subscriptions` with real processes: what a small peer on a local node
/// subscribes to is downloaded from the cloud for it, and only that; live changes follow; once the
/// peer goes, the node drops the subscription upstream after the linger.
@Suite(.serialized) struct RelayedSubscriptionsTests {
    static let kindA = "SELECT * FROM things WHERE kind = 'a'"
    static let messages = "SELECT * FROM messages"

    @Test func aPeersSubscriptionIsRelayedUpstream_servedLive_andDroppedAfterTheLinger() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            try await cloud.execute("""
                INSERT INTO things DOCUMENTS ({'_id': 'a1', 'kind': 'a'}), ({'_id': 'b1', 'kind': 'b'}), ({'_id': 'a2', 'kind': 'a'})
                """)
            // The node is configured for `messages` only: `things` reaches it through its peer.
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.messages],
                                              extra: ["--upstream-relay-subscriptions", "--upstream-relay-linger", "1"],
                                              http: http, processes: processes)
            func relayedQueries() async -> [String]? {
                (try? await node.upstreamStatus())?["subscriptions"]?.arrayValue?.compactMap { $0["query"]?.stringValue }
            }
            #expect(await eventually(within: .seconds(30)) { await relayedQueries() == [Self.messages] })
            #expect(try await node.count("things") == 0)

            let dir = NSTemporaryDirectory() + "relayed-subscriptions-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let peer = try SmallPeer(directory: dir + "/peer")
            _ = try peer.subscribe(Self.kindA)
            let client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: node.syncURL, apiKey: nil))
            func peerIDs() -> [String] {
                ((try? peer.execute("SELECT * FROM things ORDER BY _id").items) ?? []).compactMap { $0["_id"]?.stringValue }
            }
            func nodeIDs() async -> [String]? {
                (try? await node.documents("things"))?.compactMap { $0["_id"]?.stringValue }
            }

            // The node subscribes upstream to what its peer holds, and the matching cloud
            // documents reach the peer through it.
            #expect(await eventually(within: .seconds(30)) { await relayedQueries()?.contains(Self.kindA) == true })
            #expect(await eventually(within: .seconds(30)) { peerIDs() == ["a1", "a2"] }, "the cloud's matching documents reached the peer")

            // Live: a later matching write on the cloud arrives. The non-matching one, committed
            // before it, would have arrived first had it been sent: the node never holds it.
            try await cloud.execute("INSERT INTO things DOCUMENTS ({'_id': 'b2', 'kind': 'b'})")
            try await cloud.execute("INSERT INTO things DOCUMENTS ({'_id': 'a3', 'kind': 'a'})")
            #expect(await eventually(within: .seconds(30)) { peerIDs() == ["a1", "a2", "a3"] }, "a live cloud write reached the peer")
            #expect(await nodeIDs() == ["a1", "a2", "a3"], "only matching documents reached the node")

            // The peer goes: after the linger (1 s) the node holds only its configured subscription.
            let left = ContinuousClock.now
            await client.stop()
            #expect(await eventually(within: .seconds(30)) { await relayedQueries() == [Self.messages] }, "the relayed subscription was dropped")
            #expect(ContinuousClock.now - left >= .seconds(1), "not before the linger")
        }
    }
}
