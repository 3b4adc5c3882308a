import DQL
import Testing
import Values
@testable import Auth

@Suite struct JWTVerifierTests {
    /// RFC 7515 Appendix A.1: the HS256 example JWS, its key (JWK `k`) and its claims.
    static let rfcKey = Base64.decode("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow".utf8, .url)!
    static let rfcToken = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9" + "." +
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ" + "." +
        "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"

    static func verifier(at now: Int64, issuer: String? = nil, audience: String? = nil) throws -> JWTVerifier {
        try JWTVerifier(secret: Array("0123456789abcdef0123456789abcdef".utf8), issuer: issuer, audience: audience, now: { now })
    }

    @Test func rfc7515A1_verifies_andItsSignatureIsOurs() throws {
        let v = try JWTVerifier(secret: Self.rfcKey, issuer: "joe", now: { 1_300_819_370 })
        let principal = try v.verify(Self.rfcToken).get()
        #expect(principal.read == .none && principal.write == .none)  // no BigPeer claims: nothing allowed
        let parts = Self.rfcToken.split(separator: ".")
        #expect(Base64.encode(v.hmacSHA256(Array("\(parts[0]).\(parts[1])".utf8)), .url) == String(parts[2]))
        // One bit flipped anywhere: refused.
        var tampered = Array(Self.rfcToken.utf8)
        tampered[60] = tampered[60] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(throws: JWTError.self) { try v.verify(String(decoding: tampered, as: UTF8.self)).get() }
        // Expired a day later.
        let late = try JWTVerifier(secret: Self.rfcKey, now: { 1_300_819_380 + 86_400 })
        #expect(late.verify(Self.rfcToken) == .failure(.expired))
    }

    @Test func claimsBecomeScopes() throws {
        let v = try Self.verifier(at: 1000)
        let p = try v.verify(v.sign(claims: ["exp": 2000, "sub": "tablet", "read": "*", "write": ["cars", "notes"]])).get()
        #expect(p.read == .all)
        #expect(p.write == .only(["cars", "notes"]))
        #expect(p.keyID == "jwt:tablet")
        let notScopes = JWTError.malformed(#"read and write must be "*" or an array of collection names (not empty strings)"#)
        #expect(v.verify(v.sign(claims: ["exp": 2000, "read": 5])) == .failure(notScopes))
        // An empty collection name is refused, not kept as a scope no collection can match.
        #expect(v.verify(v.sign(claims: ["exp": 2000, "read": ["cars", ""]])) == .failure(notScopes))
        let emptyInPermissions: Value = ["read": ["queriesByCollection": ["": ["true"]]]]
        #expect(v.verify(v.sign(claims: ["exp": 2000, "permissions": emptyInPermissions]))
                == .failure(.malformed("permissions.read.queriesByCollection names an empty collection")))
        if case .success = v.verify(v.sign(claims: ["exp": 2000, "write": [1]])) { Issue.record("non-string collection accepted") }
    }

    @Test func timeClaims_withLeeway() throws {
        let signer = try Self.verifier(at: 0)
        let token = signer.sign(claims: ["exp": 1000, "nbf": 500, "iat": 400])
        for (now, ok) in [(439, false), (440, true), (1000, true), (1060, true), (1061, false)] {
            let result = try Self.verifier(at: Int64(now)).verify(token)
            if case .success = result { #expect(ok, "now=\(now)") } else { #expect(!ok, "now=\(now): \(result)") }
        }
        #expect(try Self.verifier(at: 0).verify(signer.sign(claims: ["read": "*"])) == .failure(.malformed("exp (expiry, seconds since the epoch) is required")))
        #expect(try Self.verifier(at: 0).verify(signer.sign(claims: ["exp": "soon"])) == .failure(.malformed("exp (expiry, seconds since the epoch) is required")))
    }

    @Test func issuerAndAudience() throws {
        let v = try Self.verifier(at: 0, issuer: "auth.example", audience: "bigpeer")
        func check(_ claims: [String: Value]) -> Bool {
            var c = claims
            c["exp"] = 100
            if case .success = v.verify(v.sign(claims: c)) { return true }
            return false
        }
        #expect(check(["iss": "auth.example", "aud": "bigpeer"]))
        #expect(check(["iss": "auth.example", "aud": ["other", "bigpeer"]]))
        #expect(!check(["iss": "evil", "aud": "bigpeer"]))
        #expect(!check(["iss": "auth.example", "aud": "other"]))
        #expect(!check(["aud": "bigpeer"]))
    }

    @Test func refusesAlgNoneOtherAlgorithmsAndMalformedTokens() throws {
        let v = try Self.verifier(at: 0)
        let claims = Base64.encode(Array(#"{"exp":100,"read":"*","write":"*"}"#.utf8), .url)
        let none = Base64.encode(Array(#"{"alg":"none"}"#.utf8), .url) + "." + claims + "."
        #expect(v.verify(none) == .failure(.unsupportedAlgorithm("\"none\"")))
        // HS512 header with a valid HS256 signature over it: the header's alg is never trusted.
        let hs512Input = Base64.encode(Array(#"{"alg":"HS512"}"#.utf8), .url) + "." + claims
        let hs512 = hs512Input + "." + Base64.encode(v.hmacSHA256(Array(hs512Input.utf8)), .url)
        #expect(v.verify(hs512) == .failure(.unsupportedAlgorithm("\"HS512\"")))
        for bad in ["", "a.b", "a.b.c.d", "!!.!!.!!", "e30.e30.", "e30=.e30.AAAA", String(repeating: "a", count: 9000)] {
            if case .success = v.verify(bad) { Issue.record("accepted \(bad)") }
        }
        #expect(throws: JWTError.secretTooShort(5)) { try JWTVerifier(secret: Array("short".utf8)) }
    }
}

/// #16 item 2: scopes match collection names byte for byte, and a name two spellings could match
/// is refused where a scope is made.
@Suite struct ScopeIdentityTests {
    @Test func scopesAreByteExact() throws {
        let kelvinScoped = CollectionScope.only(["\u{212A}ate"])
        #expect(!kelvinScoped.covers("Kate"))  // before the fix: true (Set<String> uses canonical equivalence)
        #expect(!CollectionScope.only(["Kate"]).covers("\u{212A}ate"))
        #expect(!CollectionScope.only(["caf\u{E9}"]).covers("cafe\u{301}"))
        #expect(CollectionScope.only(["Kate"]).covers("Kate"))
        #expect(kelvinScoped.invalidName != nil)
        let requirement = AccessRequirement(try DQL.parse("SELECT * FROM Kate"))
        #expect(requirement.missing(read: kelvinScoped, write: .none) != nil)
    }

    @Test func jwtScopesMustBeNFC() throws {
        let v = try JWTVerifierTests.verifier(at: 1000)
        for bad in ["\u{212A}ate", "cafe\u{301}", "a\u{0}b"] {
            if case .success = v.verify(v.sign(claims: ["exp": 2000, "read": [.string(bad)]])) { Issue.record("accepted \(bad)") }
        }
        #expect(try v.verify(v.sign(claims: ["exp": 2000, "read": ["caf\u{E9}"]])).get().read == .only(["caf\u{E9}"]))
    }
}
