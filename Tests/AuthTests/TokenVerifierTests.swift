import BigPeerTestSupport
import ServerTestSupport
import Testing
import Values
@testable import Auth

/// `TokenVerifier`: which verifier a token goes to, and its cache of verified tokens (expiry on
/// every use, a changed key set verifies again, a bound), on a manual wall clock.
@Suite struct TokenVerifierTests {
    static let secret = Array("a test secret that is long enough for HS256!".utf8)

    /// A verifier with `keys` in a JWKS file (re-read only when asked) and, if `withSecret`, the
    /// HS256 secret; its wall clock is `clock`.
    static func verifier(_ keys: [TestSigningKey], in dir: TemporaryDirectory, clock: MutexBox<Int64>, withSecret: Bool = false,
                         maxCachedTokens: Int = 4096) async throws -> TokenVerifier {
        var config = JWKSSource.Configuration(location: .file(try dir.write("jwks.json", TestSigningKey.jwks(keys))))
        config.minimumRefreshInterval = .zero
        config.maximumKeyAge = .seconds(3600)
        let source = try JWKSSource(config)
        try await source.load()
        let rules = JWTClaimRules(issuer: "https://id.test", audience: "bigpeer", leewaySeconds: 0, now: { clock.withLock { $0 } })
        let secret = withSecret ? try JWTVerifier(secret: Self.secret, issuer: "https://id.test", audience: "bigpeer", now: rules.now) : nil
        return TokenVerifier(secret: secret, jwks: JWKSVerifier(source: source, rules: rules), maxCachedTokens: maxCachedTokens)
    }

    static func claims(exp: Int64, sub: String = "tablet-7") -> [String: Value] {
        ["sub": .string(sub), "iss": "https://id.test", "aud": "bigpeer", "exp": .int(exp), "read": ["cars"], "write": "*", "site": "A"]
    }

    @Test func aCachedToken_isStillRefusedFromItsExp() async throws {
        let dir = try TemporaryDirectory("tokens")
        let clock = MutexBox<Int64>(1_000)
        let rsa = try TestSigningKey(.rs256, kid: "r")
        let v = try await Self.verifier([rsa], in: dir, clock: clock)
        let token = rsa.sign(Self.claims(exp: 1_100))
        let first = try await v.verify(token).get()
        #expect(first.refusedFrom == 1_101)
        #expect(first.principal.keyID == "jwt:tablet-7" && first.principal.read == .only(["cars"]))
        #expect(first.principal.claims["site"] == "A")
        #expect(v.cachedTokenCount == 1)
        let again = try await v.verify(token).get()
        #expect(again.principal == first.principal && again.refusedFrom == first.refusedFrom)
        clock.withLock { $0 = 1_100 }
        #expect((try? await v.verify(token).get()) != nil)
        clock.withLock { $0 = 1_101 }
        #expect(await v.verify(token).map(\.refusedFrom) == .failure(.expired))
        #expect(v.cachedTokenCount == 0)
        // A token differing in one signature bit is not the cached one.
        let fresh = rsa.sign(Self.claims(exp: 5_000))
        #expect((try? await v.verify(fresh).get()) != nil)
        var tampered = Array(fresh.utf8)
        tampered[tampered.count - 2] = tampered[tampered.count - 2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(await v.verify(String(decoding: tampered, as: UTF8.self)).map(\.refusedFrom) == .failure(.badSignature))
    }

    @Test func aChangedKeySet_verifiesCachedTokensAgain() async throws {
        let dir = try TemporaryDirectory("tokens")
        let clock = MutexBox<Int64>(1_000)
        let old = try TestSigningKey(.es256, kid: "old"), new = try TestSigningKey(.es256, kid: "new")
        let v = try await Self.verifier([old], in: dir, clock: clock)
        let token = old.sign(Self.claims(exp: 9_000))
        #expect((try? await v.verify(token).get()) != nil)
        let generation = v.jwks?.source.generation
        // The same document read again keeps the keys and the cache.
        await v.jwks?.source.refresh(.unknownKey)
        #expect(v.jwks?.source.generation == generation)
        try dir.write("jwks.json", TestSigningKey.jwks([new]))
        await v.jwks?.source.refresh(.unknownKey)
        #expect(v.jwks?.source.generation != generation)
        #expect(await v.verify(token).map(\.refusedFrom) == .failure(.unknownKey("old")))
        #expect((try? await v.verify(new.sign(Self.claims(exp: 9_000))).get()) != nil)
    }

    @Test func tokensGoToTheVerifierOfTheirAlgorithm() async throws {
        let dir = try TemporaryDirectory("tokens")
        let clock = MutexBox<Int64>(1_000)
        let ed = try TestSigningKey(.edDSA, kid: "e")
        let hs256 = try JWTVerifier(secret: Self.secret).sign(claims: Self.claims(exp: 9_000))
        let both = try await Self.verifier([ed], in: dir, clock: clock, withSecret: true)
        #expect((try? await both.verify(hs256).get()) != nil)
        #expect((try? await both.verify(ed.sign(Self.claims(exp: 9_000))).get()) != nil)
        let keySetOnly = try await Self.verifier([ed], in: dir, clock: clock)
        // HS256 is not in the key set (no oct keys): the secret-less server has no key for it.
        #expect(await keySetOnly.verify(hs256).map(\.refusedFrom) == .failure(.unknownKey(nil)))
        let secretOnly = TokenVerifier(secret: try JWTVerifier(secret: Self.secret, now: { 1_000 }))
        guard case .failure(.notAccepted) = await secretOnly.verify(ed.sign(Self.claims(exp: 9_000))) else {
            Issue.record("an EdDSA token was not refused without a key set")
            return
        }
        #expect((try? await secretOnly.verify(hs256).get()) != nil)
    }

    @Test func theCacheStaysWithinItsBound() async throws {
        let dir = try TemporaryDirectory("tokens")
        let clock = MutexBox<Int64>(1_000)
        let ed = try TestSigningKey(.edDSA, kid: "e")
        let v = try await Self.verifier([ed], in: dir, clock: clock, maxCachedTokens: 3)
        for i in 0..<10 {
            #expect((try? await v.verify(ed.sign(Self.claims(exp: 9_000, sub: "d\(i)"))).get()) != nil)
            #expect(v.cachedTokenCount <= 3)
        }
        let none = try await Self.verifier([ed], in: dir, clock: clock, maxCachedTokens: 0)
        #expect((try? await none.verify(ed.sign(Self.claims(exp: 9_000))).get()) != nil)
        #expect(none.cachedTokenCount == 0)
    }

    @Test func bearerCredentialsAreToldApartByShape() {
        #expect(Authenticator.hasJWTShape("eyJh.eyJz.c2ln"))
        #expect(Authenticator.hasJWTShape("eyJh.eyJz."))  // unsecured: refused by the verifier as alg none
        #expect(!Authenticator.hasJWTShape("bpk_0123456789abcdef_0123"))
        #expect(!Authenticator.hasJWTShape("a.b"))
        #expect(!Authenticator.hasJWTShape("a.b.c.d"))
        #expect(!Authenticator.hasJWTShape(".b.c"))
        #expect(!Authenticator.hasJWTShape("a..c"))
        #expect(!Authenticator.hasJWTShape("a.b+.c"))
    }
}
