import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Sockets
import SyncProtocol
import Testing
import Values

/// Sync peers logging in through an authentication webhook (#21 item 2): `hello.cred` as
/// `{provider, token}` through a real server, real WebSockets and a real webhook server. A grant
/// admits the peer with its scopes and ends the session at `expirationSeconds` (4001); a refusal
/// is 4001, a webhook that fails is 1013 (try again later).
@Suite struct SyncAuthWebhookTests {
    static func withServer(_ body: (InProcessServer, WebhookTestServer) async throws -> Void) async throws {
        try await WebhookTestServer.with({ _, request in
            guard case .object(let o) = request, case .string(let token)? = o["token"] else { return .json(["authenticated": false]) }
            switch token {
            case "good", "short":
                return .json(["authenticated": true, "userID": .string("user-" + token), "expirationSeconds": token == "short" ? 3 : 3600,
                              "permissions": ["read": ["queriesByCollection": ["orders": ["true"]]], "write": ["everything": false]]])
            case "boom": return .respond(status: 502, body: [])
            default: return .json(["authenticated": false])
            }
        }) { webhook in
            try await InProcessServer.with({ config in
                config.authWebhook = AuthWebhook.Configuration(providers: ["corp": webhook.url("/auth")])
            }) { server in try await body(server, webhook) }
        }
    }

    static func refusal(_ port: Int, _ credentials: SyncCredentials) async throws -> UInt16? {
        let c = try await SyncTestClient(port: port, loop: SyncEndpointTests.loops.next())
        c.send(SyncEndpointTests.hello(site: 0xE9, credentials))
        guard case .refuse(let code, _) = try await c.nextMessage() else { return nil }
        return code
    }

    @Test func aGrantedPeerSyncsWithinItsScopes_andRefusalsHaveTheirCodes() async throws {
        try await Self.withServer { server, webhook in
            _ = try await server.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o1'})", key: try await server.newKey())
            let peer = try await SyncEndpointTests.connect(server.port, site: 0xE1, .provider("corp", token: "good"))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM orders")))
            let got = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            #expect(got.contains { if case .documents(1, let e) = $0 { e.map(\.document.id) == ["o1"] } else { false } })
            peer.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM people")))
            _ = try await peer.waitFor { if case .subscriptionError(2, _) = $0 { true } else { false } }
            #expect(webhook.bodies.count == 1)

            #expect(try await Self.refusal(server.port, .provider("corp", token: "nope")) == 4001)
            #expect(try await Self.refusal(server.port, .provider("elsewhere", token: "good")) == 4001)
            #expect(try await Self.refusal(server.port, .provider("corp", token: "boom")) == 1013)
        }
    }

    @Test func theSessionEndsWith4001_whenTheGrantExpires() async throws {
        try await Self.withServer { server, _ in
            let peer = try await SyncEndpointTests.connect(server.port, site: 0xE2, .provider("corp", token: "short"))
            peer.send(.ping(1))
            _ = try await peer.waitFor { $0 == .pong(1) }
            let closed = await SyncJWKSTests.closing(peer)
            #expect(closed?.0 == 4001, "\(String(describing: closed))")
            #expect(closed?.1 == "credentials expired", "\(String(describing: closed))")
        }
    }
}
