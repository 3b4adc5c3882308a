import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Sockets
import SyncProtocol
import Testing
import Values

/// What a webhook login brings into a sync session besides its permissions (#21): its
/// `clientInfo` back to the peer in `welcome` and `auth_ok`, its `identityServiceMetadata` in
/// presence in place of what the peer's own record claims; and its token as the credential the
/// per-credential rate limit counts. A real server, real WebSockets, a real webhook server.
@Suite struct SyncWebhookSessionTests {
    /// Token `meta-X` is user X for an hour, with `clientInfo` `{"plan": X}` and metadata `{"site": X}`.
    static func withServer(_ limits: AbuseLimits? = nil, _ body: (InProcessServer, WebhookTestServer) async throws -> Void) async throws {
        try await WebhookTestServer.with({ _, request in
            guard case .object(let o) = request, case .string(let token)? = o["token"], token.hasPrefix("meta-") else {
                return .json(["authenticated": false])
            }
            let who = Value.string(String(token.dropFirst(5)))
            return .json(["authenticated": true, "userID": who, "expirationSeconds": 3600,
                          "permissions": ["read": ["everything": true], "write": ["everything": true]],
                          "clientInfo": ["plan": who], "identityServiceMetadata": ["site": who]])
        }) { webhook in
            try await InProcessServer.with({ config in
                config.authWebhook = AuthWebhook.Configuration(providers: ["corp": webhook.url("/auth")])
                if let limits { config.abuseLimits = limits }
            }) { server in try await body(server, webhook) }
        }
    }

    /// The `identityServiceMetadata` the server's presence graph shows for peer key `key`.
    static func identityMetadata(_ server: InProcessServer, admin: String, of key: [UInt8]) async throws -> Value? {
        let graph = try await server.rest(key: admin).get("/api/v4/presence")
        guard case .array(let peers)? = graph["remotePeers"] else { return nil }
        for case .object(let p) in peers where p["peerKey"] == .string(PresenceGraph.keyString(key)) { return p["identityServiceMetadata"] }
        return nil
    }

    @Test func clientInfoReturnsToThePeer_andPresenceShowsTheWebhooksMetadata_notThePeers() async throws {
        try await Self.withServer { server, _ in
            let admin = try await server.newKey()
            let peer = try await SyncTestClient(port: server.port, loop: SyncEndpointTests.loops.next())
            peer.send(SyncEndpointTests.hello(site: 0xD1, .provider("corp", token: "meta-A")))
            guard case .welcome(let welcome) = try await peer.nextMessage() else { Issue.record("no welcome"); return }
            #expect(welcome.credentials.clientInfo == ["plan": "A"])
            let ttl = welcome.credentials.validForMillis ?? 0
            #expect(ttl > 3_500_000 && ttl <= 3_600_000, "\(ttl)")

            // The peer's own record claims other identity metadata: the webhook's is shown.
            let forged = PresenceRecord(peerKey: [7, 7], epoch: 1, seq: 1, ttlMillis: 60_000, deviceName: "test-209",
                                        identityMetadata: ["site": "forged"])
            peer.send(.presence([forged]))
            #expect(try await eventually { try await Self.identityMetadata(server, admin: admin, of: [7, 7]) == ["site": "A"] })

            // New credentials with other metadata: `auth_ok` brings their clientInfo, presence their metadata.
            peer.send(.refreshAuth(.provider("corp", token: "meta-B")))
            let answer = try await peer.waitFor { if case .authRefreshed = $0 { true } else { false } }
            guard case .authRefreshed(let status)? = answer.last else { Issue.record("\(answer)"); return }
            #expect(status.clientInfo == ["plan": "B"])
            #expect(try await eventually { try await Self.identityMetadata(server, admin: admin, of: [7, 7]) == ["site": "B"] })
            var later = forged
            later.seq = 2
            peer.send(.presence([later]))
            peer.send(.ping(1))
            _ = try await peer.waitFor { $0 == .pong(1) }
            #expect(try await Self.identityMetadata(server, admin: admin, of: [7, 7]) == ["site": "B"])
        }
    }

    @Test func aWebhookToken_isACredentialOfTheRateLimit_onRESTAndSync() async throws {
        let clock = SteppedClock()
        var limits = AbuseLimits()
        limits.failedAuthentication = nil
        limits.perCredential = TokenBucketRate(perSecond: 1, burst: 2)
        limits.clock = { clock.now() }
        try await Self.withServer(limits) { server, _ in
            func select(_ token: String) async throws -> RESTReply {
                var h = HTTPHeaders()
                h.add("Authorization", "Bearer " + token)
                h.add("X-Auth-Provider", "corp")
                return try await server.rest().execute("SELECT * FROM orders", headers: h)
            }
            #expect(try await select("meta-A").status == 200)
            #expect(try await select("meta-A").status == 200)
            let refused = try await select("meta-A")
            #expect(refused.status == 429, "\(refused.text)")
            #expect(refused.text.contains("too many requests with these credentials"), "\(refused.text)")
            #expect(try await select("meta-B").status == 200, "another token has its own bucket")
            // The same token's bucket on sync.
            let c = try await SyncTestClient(port: server.port, loop: SyncEndpointTests.loops.next())
            c.send(SyncEndpointTests.hello(site: 0xD2, .provider("corp", token: "meta-A")))
            guard case .refuse(let code, let reason) = try await c.nextMessage() else { Issue.record("admitted"); return }
            #expect(code == 4003 && reason.contains("too many handshakes with these credentials"), "\(reason)")
            clock.advance(.seconds(1))
            #expect(try await select("meta-A").status == 200)
        }
    }
}
