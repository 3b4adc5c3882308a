import Foundation
import BigPeerTestSupport
import Testing
import Values
@testable import Auth

/// Verification of every algorithm against its key set, and everything that must be refused.
@Suite struct JWKSVerifierTests {
    static let rules = JWTClaimRules(issuer: "https://id.example", audience: "bigpeer", now: { JOSEVectors.now })

    /// A verifier over a file holding `document` (loaded once).
    static func verifier(_ document: String, in dir: TemporaryDirectory, rules: JWTClaimRules = rules,
                         allowSymmetricKeys: Bool = false) async throws -> JWKSVerifier {
        let path = try dir.write("jwks.json", document)
        var config = JWKSSource.Configuration(location: .file(path))
        config.limits.allowSymmetricKeys = allowSymmetricKeys
        config.minimumRefreshInterval = .seconds(30)  // no re-read by age or by a test's pace
        config.maximumKeyAge = .seconds(600)
        let source = try JWKSSource(config)
        try await source.load()
        return JWKSVerifier(source: source, rules: rules)
    }

    @Test func everyAlgorithmVerifiesItsKnownAnswer() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            let v = try await Self.verifier(JOSEVectors.jwks, in: dir)
            for token in [JOSEVectors.rsa1Token, JOSEVectors.rsa2Token, JOSEVectors.ec1Token, JOSEVectors.ed1Token] {
                let p = try await v.verify(token).get()
                #expect(p.keyID == "jwt:tablet-7" && p.read == .all && p.write == .only(["orders"]))
                // Flip a bit in the payload, then in the signature: refused either way.
                var parts = token.split(separator: ".").map(String.init)
                let payload = Base64.decode(parts[1].utf8, .url)!
                parts[1] = Base64.encode(Array(String(decoding: payload, as: UTF8.self).replacingOccurrences(of: "orders", with: "ordert").utf8), .url)
                #expect(await v.verify(parts.joined(separator: ".")) == .failure(.badSignature))
                var signature = Base64.decode(token.split(separator: ".")[2].utf8, .url)!
                signature[signature.count / 2] ^= 1
                let forged = token.split(separator: ".")[0...1].joined(separator: ".") + "." + Base64.encode(signature, .url)
                #expect(await v.verify(forged) == .failure(.badSignature))
            }
            #expect(v.source.fetchCount == 1)
        }
    }

    @Test func oneKeyVerifiesOnManyThreadsAtOnce() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            let v = try await Self.verifier(JOSEVectors.jwks, in: dir)
            let tokens = [JOSEVectors.rsa1Token, JOSEVectors.ec1Token, JOSEVectors.ed1Token]
            let accepted = await withTaskGroup(of: Int.self) { group in
                for task in 0..<6 {
                    group.addTask {
                        var ok = 0
                        for _ in 0..<50 where (try? v.verifyCached(tokens[task % 3]).get()) != nil { ok += 1 }
                        return ok
                    }
                }
                return await group.reduce(0, +)
            }
            #expect(accepted == 300)
        }
    }

    @Test func refusesAlgNoneAndAlgorithmConfusion() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            let v = try await Self.verifier(JOSEVectors.jwks, in: dir)
            let payload = String(decoding: JSON.serialize(.object(JOSEVectors.claims)), as: UTF8.self)
            let none = Base64.encode(Array(#"{"alg":"none","kid":"rsa-1"}"#.utf8), .url) + "." + Base64.encode(Array(payload.utf8), .url) + "."
            #expect(await v.verify(none) == .failure(.unsupportedAlgorithm("\"none\"")))
            // The RSA public key's own bytes (PEM, and the DER inside it) as an HMAC secret: the
            // key verifies RS256 only, with or without the kid.
            let pemBytes = Array(JOSEVectors.rsa1PEM.utf8)
            let der = Base64.decode(JOSEVectors.rsa1PEM.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined().utf8)!
            for secret in [pemBytes, pemBytes + [0x0A], der] {
                let withKid = JOSEVectors.hmacToken(header: #"{"alg":"HS256","kid":"rsa-1"}"#, payload: payload, secret: secret)
                #expect(await v.verify(withKid) == .failure(.algorithmNotAllowedForKey("HS256", keyID: "rsa-1")))
                let withoutKid = JOSEVectors.hmacToken(header: #"{"alg":"HS256"}"#, payload: payload, secret: secret)
                #expect(await v.verify(withoutKid) == .failure(.unknownKey(nil)))
            }
            // An ES256 header on the RSA key's kid, and an RS256 signature presented as EdDSA.
            let parts = JOSEVectors.rsa1Token.split(separator: ".")
            for header in [#"{"alg":"ES256","kid":"rsa-1"}"#, #"{"alg":"EdDSA","kid":"rsa-1"}"#, #"{"alg":"RS256","kid":"ec-1"}"#] {
                let token = Base64.encode(Array(header.utf8), .url) + "." + parts[1] + "." + parts[2]
                if case .success = await v.verify(token) { Issue.record("accepted \(header)") }
            }
            let hs512 = JOSEVectors.hmacToken(header: #"{"alg":"HS512","kid":"rsa-1"}"#, payload: payload, secret: der)
            #expect(await v.verify(hs512) == .failure(.unsupportedAlgorithm("\"HS512\"")))
        }
    }

    @Test func refusesUnknownKidsBadEncodingsAndOversizedTokens() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            let v = try await Self.verifier(JOSEVectors.jwks, in: dir)
            let parts = JOSEVectors.rsa1Token.split(separator: ".").map(String.init)
            let otherKid = Base64.encode(Array(#"{"alg":"RS256","kid":"rsa-9"}"#.utf8), .url)
            #expect(await v.verify(otherKid + "." + parts[1] + "." + parts[2]) == .failure(.unknownKey("rsa-9")))
            // Two RS256 keys and no kid: which one is not guessed.
            let noKid = Base64.encode(Array(#"{"alg":"RS256"}"#.utf8), .url)
            if case .success = await v.verify(noKid + "." + parts[1] + "." + parts[2]) { Issue.record("kid-less token matched one of two keys") }
            let padded = parts[0] + "." + parts[1] + "=." + parts[2]
            let standardAlphabet = parts[0] + "." + parts[1] + "." + parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            for bad in [padded, standardAlphabet, parts[0] + "." + parts[1], parts.joined(separator: ".") + ".x", "", "..", "a.b.c"] {
                if case .success = await v.verify(bad) { Issue.record("accepted \(bad.prefix(40))") }
            }
            #expect(parts[2].contains("-") || parts[2].contains("_"))
            let huge = parts[0] + "." + Base64.encode([UInt8](repeating: 0x20, count: 13_000), .url) + "." + parts[2]
            #expect(await v.verify(huge) == .failure(.malformed("token longer than \(JWKSVerifier.maxTokenBytes) bytes")))
            // ES256 signatures are exactly r || s: a DER-encoded or shortened one is refused.
            let ec = JOSEVectors.ec1Token.split(separator: ".").map(String.init)
            let raw = Base64.decode(ec[2].utf8, .url)!
            for signature in [DER.ecdsaSignature(raw: raw), Array(raw.dropLast()), raw + [0]] {
                #expect(await v.verify(ec[0] + "." + ec[1] + "." + Base64.encode(signature, .url)) == .failure(.badSignature))
            }
        }
    }

    static let secret = Array("a shared secret of at least 32 bytes!".utf8)
    static let octJWKS = #"{"keys":[{"kty":"oct","kid":"hs-1","alg":"HS256","k":""# + Base64.encode(secret, .url) + #""}]}"#

    @Test func claims_withAndWithoutLeeway() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            func accepted(_ claims: [String: Value], now: Int64, leeway: Int64, issuer: String? = "iss-a", audience: String? = "aud-a") async throws -> Bool {
                let rules = JWTClaimRules(issuer: issuer, audience: audience, leewaySeconds: leeway, now: { now })
                let v = try await Self.verifier(Self.octJWKS, in: dir, rules: rules, allowSymmetricKeys: true)
                var c = claims
                if c["iss"] == nil { c["iss"] = "iss-a" }
                if c["aud"] == nil { c["aud"] = "aud-a" }
                let token = JOSEVectors.hmacToken(header: #"{"alg":"HS256","kid":"hs-1","typ":"JWT"}"#,
                                                  payload: String(decoding: JSON.serialize(.object(c)), as: UTF8.self), secret: Self.secret)
                if case .success = await v.verify(token) { return true }
                return false
            }
            // exp 1000, nbf 500, iat 450 against the clock, leeway 60 and 0.
            let times: [String: Value] = ["exp": 1000, "nbf": 500, "iat": 450]
            for (now, leeway, ok) in [(1060, 60, true), (1061, 60, false), (1000, 0, true), (1001, 0, false),
                                      (440, 60, true), (439, 60, false), (500, 0, true), (499, 0, false)] as [(Int64, Int64, Bool)] {
                #expect(try await accepted(times, now: now, leeway: leeway) == ok, "now \(now) leeway \(leeway)")
            }
            // iat in the future beyond leeway, even with nbf absent.
            #expect(try await !accepted(["exp": 9000, "iat": 800], now: 700, leeway: 60))
            #expect(try await accepted(["exp": 9000, "iat": 760], now: 700, leeway: 60))
            #expect(try await !accepted(["iat": 100], now: 700, leeway: 60))  // exp is required
            #expect(try await accepted(["exp": .int(Int64.max), "nbf": .int(Int64.min), "iat": .int(Int64.min)], now: 700, leeway: 60))
            #expect(try await accepted(["exp": 9000, "aud": ["x", "aud-a"]], now: 0, leeway: 0))
            #expect(try await !accepted(["exp": 9000, "aud": ["x", "y"]], now: 0, leeway: 0))
            #expect(try await !accepted(["exp": 9000, "aud": 5], now: 0, leeway: 0))
            #expect(try await !accepted(["exp": 9000, "iss": "iss-b"], now: 0, leeway: 0))
            #expect(try await accepted(["exp": 9000, "iss": "anyone", "aud": "anything"], now: 0, leeway: 0, issuer: nil, audience: nil))
        }
    }

    @Test func payloadMustBeOneJSONObject() async throws {
        do { let dir = try TemporaryDirectory("jwks")
            let v = try await Self.verifier(Self.octJWKS, in: dir, allowSymmetricKeys: true)
            for payload in [#"[1,2]"#, #""text""#, #"{"exp":2000000000,"exp":1}"#, "not json"] {
                let token = JOSEVectors.hmacToken(header: #"{"alg":"HS256","kid":"hs-1"}"#, payload: payload, secret: Self.secret)
                #expect(await v.verify(token) == .failure(.malformed("the claims are not a JSON object")), "\(payload)")
            }
            let duplicateHeader = JOSEVectors.hmacToken(header: #"{"alg":"HS256","alg":"none","kid":"hs-1"}"#, payload: "{}", secret: Self.secret)
            #expect(await v.verify(duplicateHeader) == .failure(.malformed("the header is not a JSON object")))
            // The same oct key is refused where shared secrets are not allowed.
            #expect(try JOSEVectors.set(Self.octJWKS).keys.isEmpty)
        }
    }
}
