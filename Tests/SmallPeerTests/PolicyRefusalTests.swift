import BigPeerServer
import BigPeerTestSupport
@testable import SmallPeer
import ServerTestSupport
import Sockets
import SyncPeer
import Testing

/// A small peer the server's connection policy denies waits as long as the refusal says
/// (`; retry after N s`, docs/PROTOCOL.md §4.2) before it tries again, not the backoff's 100 ms.
@Suite struct PolicyRefusalTests {
    @Test func aDeniedPeer_waitsTheDelayTheRefusalNames() async throws {
        let files = try TemporaryDirectory("bigpeer-policy")
        let policy = try files.write("policy.json", #"{"version": 1, "default": "deny", "retryAfterSeconds": 3600, "rules": []}"#)
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await InProcessServer.with({ $0.peerPolicyFile = policy }) { server in
            let peer = try openPeer(dir.path)
            var configuration = SyncClient.Configuration(url: "ws://127.0.0.1:\(server.port)", apiKey: try await server.newKey())
            configuration.reconnectBase = .milliseconds(100)
            let client = try SyncClient(peer: peer, configuration: configuration)
            let core = client.core
            #expect(await eventually {
                (try? await core.loop.submit { core.value.links[0].scheduledReconnectDelay }) ?? nil != nil
            }, "no reconnect was scheduled")
            let delay = try await core.loop.submit { core.value.links[0].scheduledReconnectDelay }
            let status = client.status
            await client.stop()
            #expect(delay == .seconds(3600))
            // The refusal's reason, whether the server's close frame (with the reason) or the
            // echo of the client's own close (code only) ended the link.
            #expect(status.lastError == "the server refused the session (4003): denied by connection policy (no rule allows this peer); retry after 3600 s",
                    "\(status)")
            #expect(status.linksOpened == 1)
            #expect(status.phase != .failed, "a policy refusal is not final")
        }
    }
}
