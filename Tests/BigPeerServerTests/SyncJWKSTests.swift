import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Sockets
import SyncProtocol
import Testing
import Values

/// Sync peers with JWKS-verified JWTs (#21 item 1) through a real server, real WebSockets and a
/// real PostgreSQL: `hello.cred` and the in-session `auth` refresh take them like HS256 tokens,
/// the session ends with 4001 at the token's `exp` (no leeway here), and a peer arriving while
/// the keys cannot be fetched is told to try again later.
@Suite struct SyncJWKSTests {
    static let rules = JWTClaimRules(issuer: "https://id.test", audience: "bigpeer", leewaySeconds: 0)

    /// A server verifying JWTs with `keys` from a JWKS file, and an API key.
    static func withServer(_ keys: [TestSigningKey], _ body: (InProcessServer, String) async throws -> Void) async throws {
        let dir = try TemporaryDirectory("jwks")
        let path = try dir.write("jwks.json", TestSigningKey.jwks(keys))
        try await InProcessServer.with({ config in
            config.jwks = JWKSSource.Configuration(location: .file(path))
            config.jwtRules = rules
        }) { server in
            try await body(server, try await server.newKey())
        }
    }

    /// The close code and reason once the session ends (nil if it has not within 30 s).
    static func closing(_ peer: SyncTestClient) async -> (UInt16, String)? {
        let end = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < end {
            if case .closed(let code, let reason)? = await peer.next(timeout: .seconds(1)) { return (code, reason) }
        }
        return nil
    }

    @Test func aJWKSToken_syncs_andTheSessionEndsWith4001_atItsExp() async throws {
        let rsa = try TestSigningKey(.rs256, kid: "rsa-a")
        try await Self.withServer([rsa]) { server, key in
            _ = try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'j'})", key: key)
            let claims = TestSigningKey.claims(ttl: 4, read: ["cars"], write: ["cars"])
            guard case .int(let exp)? = claims["exp"] else { return }
            let peer = try await SyncEndpointTests.connect(server.port, site: 0xF1, .jwt(rsa.sign(claims)))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            let got = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            #expect(got.contains { if case .documents(1, let e) = $0 { e.map(\.document.id) == ["j"] } else { false } })
            // The token's scopes bound the session.
            peer.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM people")))
            _ = try await peer.waitFor { if case .subscriptionError(2, _) = $0 { true } else { false } }
            let closed = await Self.closing(peer)
            #expect(closed?.0 == 4001, "\(String(describing: closed))")
            #expect(closed?.1 == "credentials expired", "\(String(describing: closed))")
            #expect(JWTVerifier.wallClockSeconds() > exp, "the session ended before the token's exp")
        }
    }

    @Test func auth_withAJWKSToken_extendsTheSession_andATokenOfAnUnknownKeyEndsIt() async throws {
        let ec = try TestSigningKey(.es256, kid: "ec-a"), ed = try TestSigningKey(.edDSA, kid: "ed-a")
        let stranger = try TestSigningKey(.edDSA, kid: "ed-unknown")
        try await Self.withServer([ec, ed]) { server, key in
            let first = TestSigningKey.claims(ttl: 6)
            guard case .int(let exp)? = first["exp"] else { return }
            let peer = try await SyncEndpointTests.connect(server.port, site: 0xF2, .jwt(ec.sign(first)))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            peer.send(.refreshAuth(.jwt(ed.sign(TestSigningKey.claims(ttl: 3600)))))
            _ = try await peer.waitFor { if case .authRefreshed = $0 { true } else { false } }
            // Past the first token's exp, the session still runs and delivers.
            while JWTVerifier.wallClockSeconds() <= exp + 1 {
                if case .closed(let code, let reason)? = await peer.next(timeout: .milliseconds(200)) {
                    Issue.record("closed \(code) \(reason) although the token was refreshed")
                    return
                }
            }
            _ = try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after-exp'})", key: key)
            _ = try await peer.waitFor { m in
                if case .changes(_, let e) = m { e.contains { $0.document.id == "after-exp" } } else { false }
            }
            peer.send(.refreshAuth(.jwt(stranger.sign(TestSigningKey.claims(ttl: 3600)))))
            #expect(await peer.closeCode() == 4001)
        }
    }

    @Test func whileTheKeySetCannotBeFetched_aJWTPeerIsToldToTryAgainLater_andAnAPIKeyPeerIsServed() async throws {
        let rsa = try TestSigningKey(.rs256, kid: "rsa-a")
        try await WebhookTestServer.with({ _, _ in .respond(status: 500, body: Array("down".utf8)) }) { provider in
            try await InProcessServer.with({ config in
                config.jwks = JWKSSource.Configuration(location: .url(provider.url("/jwks.json")))
                config.jwtRules = Self.rules
            }) { server in
                let c = try await SyncTestClient(port: server.port, loop: SyncEndpointTests.loops.next())
                c.send(SyncEndpointTests.hello(site: 0xF3, .jwt(rsa.sign(TestSigningKey.claims(ttl: 600)))))
                guard case .refuse(let code, _) = try await c.nextMessage() else { Issue.record("a JWT was accepted without keys"); return }
                #expect(code == 1013)
                let keyed = try await SyncEndpointTests.connect(server.port, site: 0xF4, .apiKey(try await server.newKey()))
                keyed.send(.ping(1))
                _ = try await keyed.waitFor { $0 == .pong(1) }
            }
        }
    }
}
