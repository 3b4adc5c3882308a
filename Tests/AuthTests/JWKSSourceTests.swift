import BigPeerTestSupport
import Testing
import Values
@testable import Auth

/// Key rotation without a restart: a file whose contents change and a URL served by a real HTTP
/// server, re-read on an unknown kid (rate-limited) and by age. The monotonic clock is manual.
@Suite struct JWKSSourceTests {
    final class ManualClock: Sendable {
        let start = ContinuousClock.now
        let elapsed = MutexBox<Duration>(.zero)
        func advance(_ d: Duration) { elapsed.withLock { $0 += d } }
        var now: @Sendable () -> ContinuousClock.Instant { { [start, elapsed] in start + elapsed.withLock { $0 } } }
    }

    static func verifier(_ location: JWKSSource.Location, clock: ManualClock) throws -> JWKSVerifier {
        var config = JWKSSource.Configuration(location: location)
        config.minimumRefreshInterval = .seconds(30)
        config.maximumKeyAge = .seconds(600)
        return JWKSVerifier(source: try JWKSSource(config, monotonic: clock.now), rules: JWKSVerifierTests.rules)
    }

    static func accepts(_ v: JWKSVerifier, _ token: String) async -> Bool {
        if case .success = await v.verify(token) { return true }
        return false
    }

    @Test func fileRotation_unknownKidRefreshIsRateLimited_andKeysAgeOut() async throws {
        let dir = try TemporaryDirectory("jwks")
        let path = try dir.write("jwks.json", try JOSEVectors.document(["rsa-1"]))
        let clock = ManualClock()
        let v = try Self.verifier(.file(path), clock: clock)
        try await v.source.load()
        #expect(await Self.accepts(v, JOSEVectors.rsa1Token))
        // The provider adds rsa-2; a token with it arrives at once: within the rate limit, no re-read.
        try dir.write("jwks.json", try JOSEVectors.document(["rsa-1", "rsa-2"]))
        clock.advance(.seconds(10))
        #expect(await v.verify(JOSEVectors.rsa2Token) == .failure(.unknownKey("rsa-2")))
        #expect(v.source.fetchCount == 1)
        // Once the interval passed, the unknown kid re-reads the file, once.
        clock.advance(.seconds(20))
        #expect(await Self.accepts(v, JOSEVectors.rsa2Token))
        #expect(v.source.fetchCount == 2)
        for kid in ["x1", "x2", "x3"] {
            let forged = Base64.encode(Array(#"{"alg":"RS256","kid":"\#(kid)"}"#.utf8), .url) + JOSEVectors.rsa1Token.drop { $0 != "." }
            #expect(await v.verify(forged) == .failure(.unknownKey(kid)))
        }
        #expect(v.source.fetchCount == 2)
        // rsa-1 retired: still accepted until the keys age out, then refused without a restart.
        try dir.write("jwks.json", try JOSEVectors.document(["rsa-2"]))
        clock.advance(.seconds(599))
        #expect(await Self.accepts(v, JOSEVectors.rsa1Token))
        #expect(v.source.fetchCount == 2)
        // Aged keys: the token is checked with the keys at hand while they are re-read.
        clock.advance(.seconds(1))
        #expect(await Self.accepts(v, JOSEVectors.rsa1Token))
        await v.source.settled()
        #expect(v.source.fetchCount == 3)
        #expect(await v.verify(JOSEVectors.rsa1Token) == .failure(.unknownKey("rsa-1")))
        #expect(v.source.fetchCount == 3)
        // A broken document keeps the keys the source had, and says why.
        try dir.write("jwks.json", "{not json")
        clock.advance(.seconds(600))
        #expect(await Self.accepts(v, JOSEVectors.rsa2Token))
        await v.source.settled()
        #expect(v.source.fetchCount == 4)
        #expect(v.source.lastError != nil)
        #expect(await Self.accepts(v, JOSEVectors.rsa2Token))
    }

    @Test func startupLoadFailsLoudly() async throws {
        let dir = try TemporaryDirectory("jwks")
        let clock = ManualClock()
        let missing = try Self.verifier(.file(dir.path + "/absent.json"), clock: clock)
        await #expect(throws: JWKError.self) { try await missing.source.load() }
        #expect(await missing.verify(JOSEVectors.rsa1Token) == .failure(.keysUnavailable(missing.source.lastError?.description ?? "")))
        let big = try dir.write("big.json", String(repeating: " ", count: 300_000) + JOSEVectors.jwks)
        await #expect(throws: JWKError.self) { try await Self.verifier(.file(big), clock: clock).source.load() }
        #expect(JWKSSource.Location("https://id.example/.well-known/jwks.json") == .url("https://id.example/.well-known/jwks.json"))
        #expect(JWKSSource.Location("/etc/bigpeer/jwks.json") == .file("/etc/bigpeer/jwks.json"))
    }

    @Test func urlRotation_overRealHTTP_countsFetches() async throws {
        let served = MutexBox(try JOSEVectors.document(["ec-1"]))
        try await WebhookTestServer.with({ _, _ in
            .respond(status: 200, body: Array(served.withLock { $0 }.utf8))
        }) { server in
            let clock = ManualClock()
            let v = try Self.verifier(.url(server.url("/.well-known/jwks.json")), clock: clock)
            try await v.source.load()
            #expect(await Self.accepts(v, JOSEVectors.ec1Token))
            #expect(await v.verify(JOSEVectors.ed1Token) == .failure(.unknownKey("ed-1")))
            #expect(server.bodies.count == 1)  // rate-limited: the server saw the startup fetch only
            served.withLock { $0 = (try? JOSEVectors.document(["ec-1", "ed-1"])) ?? "" }
            clock.advance(.seconds(30))
            // Many concurrent verifications of the new kid: one fetch.
            let results = await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<8 { group.addTask { await Self.accepts(v, JOSEVectors.ed1Token) } }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(results == Array(repeating: true, count: 8))
            #expect(server.bodies.count == 2)
            #expect(v.source.fetchCount == 2)
            await v.source.shutdown()
        }
        // A failing server at startup is a load error.
        try await WebhookTestServer.with({ _, _ in .respond(status: 500, body: []) }) { server in
            let v = try Self.verifier(.url(server.url("/jwks")), clock: ManualClock())
            await #expect(throws: JWKError.self) { try await v.source.load() }
            await v.source.shutdown()
        }
    }
}
