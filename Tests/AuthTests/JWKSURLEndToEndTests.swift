import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Testing
import Values

/// `--jwks URL` through a real server and a real identity provider stand-in (an HTTP server in
/// the test): tokens verified with the fetched keys, 503 + `Retry-After` while the keys cannot be
/// fetched (API keys unaffected), the keys picked up once the provider answers, and a rotation at
/// the provider followed without a restart.
@Suite struct JWKSURLEndToEndTests {
    @Test func keysFromAURL_503UntilTheProviderAnswers_thenRotation() async throws {
        let first = try TestSigningKey(.rs256, kid: "k1"), second = try TestSigningKey(.edDSA, kid: "k2")
        // What the provider serves now (nil: 503, it is down).
        let published = MutexBox<String?>(nil)
        try await WebhookTestServer.with({ _, _ in
            published.withLock { $0 }.map { .respond(status: 200, body: Array($0.utf8)) } ?? .respond(status: 503, body: Array("down".utf8))
        }) { provider in
            try await withServer({ config in
                var source = JWKSSource.Configuration(location: .url(provider.url("/.well-known/jwks.json")))
                source.minimumRefreshInterval = .milliseconds(50)
                source.maximumKeyAge = .milliseconds(100)
                config.jwks = source
                config.jwtRules = JWTEndToEndTests.rules
            }) { s in
                let token = first.sign(TestSigningKey.claims(ttl: 600))
                // The provider is down at start: the server starts anyway; JWTs get 503, API keys work.
                let unavailable = try await JWTEndToEndTests.execute(s, "SELECT * FROM cars", token: token)
                #expect(unavailable.status == 503, "\(unavailable.text)")
                #expect(unavailable.headers["Retry-After"] == "2")
                #expect(unavailable.description?.contains("keys are unavailable") == true, "\(unavailable.text)")
                #expect(try await s.execute("SELECT * FROM cars", key: try await s.newKey()).status == 200)

                published.withLock { $0 = TestSigningKey.jwks([first]) }
                #expect(try await eventually { try await JWTEndToEndTests.execute(s, "SELECT * FROM cars", token: token).status == 200 })

                // Rotation at the provider: k2 replaces k1.
                published.withLock { $0 = TestSigningKey.jwks([second]) }
                let rotated = second.sign(TestSigningKey.claims(ttl: 600))
                #expect(try await eventually { try await JWTEndToEndTests.execute(s, "SELECT * FROM cars", token: rotated).status == 200 })
                #expect(try await eventually { try await JWTEndToEndTests.execute(s, "SELECT * FROM cars", token: token).status == 401 })
                // The provider goes down again: the keys at hand stay in use.
                published.withLock { $0 = nil }
                #expect(try await JWTEndToEndTests.execute(s, "SELECT * FROM cars", token: rotated).status == 200)
                #expect(provider.bodies.count >= 3)
            }
        }
    }
}
