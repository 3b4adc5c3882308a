@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Postgres
import Testing
import Values

/// JWTs on REST (#21 item 1) through a real server, real sockets and a real PostgreSQL: RS256,
/// ES256 and EdDSA tokens from a JWKS file, every refusal with its RFC 6750 challenge, a key set
/// that cannot be loaded at start, and key rotation in the file without a restart.
@Suite struct JWTEndToEndTests {
    static let rules = JWTClaimRules(issuer: "https://id.test", audience: "bigpeer", leewaySeconds: 0)

    /// A server accepting API keys and the JWTs of a JWKS file holding `keys` (re-read by age
    /// every 100 ms here, so a rotation shows up at a test's pace).
    static func withJWKSFile(_ keys: [TestSigningKey], _ body: (TestServer, TemporaryDirectory) async throws -> Void) async throws {
        let dir = try TemporaryDirectory("jwks")
        let path = try dir.write("jwks.json", TestSigningKey.jwks(keys))
        try await withServer({ config in
            var source = JWKSSource.Configuration(location: .file(path))
            source.minimumRefreshInterval = .milliseconds(50)
            source.maximumKeyAge = .milliseconds(100)
            config.jwks = source
            config.jwtRules = rules
        }) { server in try await body(server, dir) }
    }

    static func bearer(_ token: String) -> HTTPHeaders {
        var h = HTTPHeaders()
        h.add("Authorization", "Bearer " + token)
        return h
    }

    /// `statement` through `/api/v4/store/execute` with `token` as the bearer credential.
    static func execute(_ s: TestServer, _ statement: String, token: String) async throws -> RESTReply {
        try await s.rest().execute(statement, headers: bearer(token))
    }

    @Test func everyAlgorithm_fromAFile_authenticatesAndScopesTheRESTRoutes() async throws {
        let keys = try [TestSigningKey(.rs256, kid: "rsa-a"), TestSigningKey(.es256, kid: "ec-a"), TestSigningKey(.edDSA, kid: "ed-a")]
        try await Self.withJWKSFile(keys) { s, _ in
            let admin = try await s.newKey()
            #expect(try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1'})", key: admin).status == 200)
            for key in keys {
                let token = key.sign(TestSigningKey.claims(ttl: 600, read: ["cars"], write: ["cars"]))
                let read = try await Self.execute(s, "SELECT * FROM cars", token: token)
                #expect(read.status == 200, "\(key.algorithm): \(read.text)")
                #expect(read["items"]?.arrayCount ?? 0 >= 1, "\(key.algorithm): \(read.text)")
                #expect(try await Self.execute(s, "INSERT INTO cars DOCUMENTS ({'_id': '\(key.kid)'})", token: token).status == 200)
                // The legacy endpoints and the attachment routes share the check (past it, an unknown attachment is 404).
                #expect(try await s.rest().post("/api/v4/store/count", ["collection": "cars"], headers: Self.bearer(token)).status == 200)
                #expect(try await s.rest().get("/api/v4/attachments/" + String(repeating: "ab", count: 32), headers: Self.bearer(token)).status == 404)
                #expect(try await s.rest().get("/api/v4/attachments/" + String(repeating: "ab", count: 32)).status == 401)
                // The token's scopes bound it like an API key's.
                let other = try await Self.execute(s, "SELECT * FROM people", token: token)
                #expect(other.status == 403, "\(key.algorithm)")
                #expect(other.description == "not permitted: this JWT cannot read collection people", "\(other.text)")
                #expect(other.headers["WWW-Authenticate"]?.contains(#"error="insufficient_scope""#) == true)
                #expect(try await s.rest().post("/api/v4/store/find", ["collection": "people"], headers: Self.bearer(token)).status == 403)
                #expect(try await s.rest().get("/api/v4/presence", headers: Self.bearer(token)).status == 403)
                let everything = key.sign(TestSigningKey.claims(ttl: 600))
                #expect(try await s.rest().get("/api/v4/presence", headers: Self.bearer(everything)).status == 200)
            }
            // API keys keep working next to JWTs.
            #expect(try await s.execute("SELECT * FROM cars", key: admin)["items"]?.arrayCount == 4)
        }
    }

    @Test func badTokens_get401_withAnInvalidTokenChallenge() async throws {
        let rsa = try TestSigningKey(.rs256, kid: "rsa-a"), ec = try TestSigningKey(.es256, kid: "ec-a")
        let stranger = try TestSigningKey(.rs256, kid: "rsa-unknown"), impostor = try TestSigningKey(.rs256, kid: "rsa-a")
        try await Self.withJWKSFile([rsa, ec]) { s, _ in
            let good = TestSigningKey.claims(ttl: 600)
            #expect(try await Self.execute(s, "SELECT * FROM cars", token: rsa.sign(good)).status == 200)
            var claims = good
            claims["exp"] = .int(JWTVerifier.wallClockSeconds() - 5)
            let expired = rsa.sign(claims)
            claims = good
            claims["nbf"] = .int(JWTVerifier.wallClockSeconds() + 600)
            let notYet = ec.sign(claims)
            let wrongAudience = rsa.sign(TestSigningKey.claims(ttl: 600, audience: "someone-else"))
            let wrongIssuer = ec.sign(TestSigningKey.claims(ttl: 600, issuer: "https://evil.test"))
            let header = Base64.encode(JSON.serialize(["alg": "none", "typ": "JWT"]), .url)
            let unsigned = header + "." + Base64.encode(JSON.serialize(.object(good)), .url) + "."
            // HS256 with the RSA public key (its DER, as a PEM-reading library would take it) as the secret.
            guard case .string(let n)? = rsa.jwk["n"], case .string(let e)? = rsa.jwk["e"],
                  let modulus = Base64.decode(n.utf8, .url), let exponent = Base64.decode(e.utf8, .url) else {
                Issue.record("no RSA public key")
                return
            }
            let confusedInput = Base64.encode(JSON.serialize(["alg": "HS256", "kid": "rsa-a", "typ": "JWT"]), .url) + "."
                + Base64.encode(JSON.serialize(.object(good)), .url)
            let confused = confusedInput + "." + Base64.encode(hmacSHA256(secret: DER.rsaPublicKeyInfo(modulus: modulus, exponent: exponent),
                                                                          Array(confusedInput.utf8)[...]), .url)
            let cases: [(String, String, String)] = [
                ("expired", expired, "has expired"),
                ("nbf in the future", notYet, "not valid yet"),
                ("wrong aud", wrongAudience, "audience"),
                ("wrong iss", wrongIssuer, "issuer"),
                ("alg none", unsigned, "none"),
                ("HS256 with the RSA key", confused, "HS256 may not be used"),
                ("unknown kid", stranger.sign(good), #"no JWT verification key has kid 'rsa-unknown'"#),
                ("another key's signature", impostor.sign(good), "signature does not verify"),
                ("a kid that tries to break the header", stranger.sign(good, header: ["kid": "x\"\r\nSet-Cookie: a=b\\"]), "kid 'x'??Set-Cookie: a=b''"),
            ]
            for (what, token, reason) in cases {
                let r = try await Self.execute(s, "SELECT * FROM cars", token: token)
                #expect(r.status == 401, "\(what): \(r.text)")
                let challenge = r.headers["WWW-Authenticate"] ?? ""
                #expect(challenge.hasPrefix(#"Bearer realm="bigpeer", error="invalid_token", error_description=""#), "\(what): \(challenge)")
                #expect(challenge.contains(reason), "\(what): \(challenge)")
                #expect(challenge.filter { $0 == "\"" }.count == 6, "\(what): \(challenge)")
            }
        }
        // A server with no JWT verification configured refuses a JWT as such, not as a malformed key.
        try await withServer { s in
            let r = try await Self.execute(s, "SELECT * FROM cars", token: rsa.sign(TestSigningKey.claims(ttl: 600)))
            #expect(r.status == 401)
            #expect(r.description?.contains("does not accept") == true, "\(r.text)")
            #expect(r.headers["WWW-Authenticate"]?.contains(#"error="invalid_token""#) == true)
        }
    }

    @Test func aKeyFileThatCannotBeLoaded_stopsTheStart() async throws {
        let dir = try TemporaryDirectory("jwks")
        let unusable = try dir.write("unusable.json", #"{"keys": [{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}]}"#)
        let cases = [("missing", dir.path + "/absent.json"), ("not JSON", try dir.write("bad.json", "{")), ("no usable key", unusable)]
        try await TestPostgres.withDatabase { db in
            for (what, path) in cases {
                var config = InProcessServer.configuration(db)
                config.jwks = JWKSSource.Configuration(location: .file(path))
                do {
                    let service = try await BigPeerService.start(config)
                    await service.stop()
                    Issue.record("\(what): the server started")
                } catch let error as JWKError {
                    #expect(!error.reason.isEmpty, "\(what)")
                }
            }
        }
    }

    @Test func aRotatedKeyFile_acceptsTheNewKey_andRefusesTheRemovedOne_withoutARestart() async throws {
        let old = try TestSigningKey(.es256, kid: "2026-01"), new = try TestSigningKey(.es256, kid: "2026-02")
        try await Self.withJWKSFile([old]) { s, dir in
            let oldToken = old.sign(TestSigningKey.claims(ttl: 600)), newToken = new.sign(TestSigningKey.claims(ttl: 600))
            #expect(try await Self.execute(s, "SELECT * FROM cars", token: oldToken).status == 200)  // verified, and cached
            #expect(try await Self.execute(s, "SELECT * FROM cars", token: newToken).status == 401)
            // The provider publishes the new key next to the old one, then drops the old one.
            try dir.write("jwks.json", TestSigningKey.jwks([old, new]))
            #expect(try await eventually { try await Self.execute(s, "SELECT * FROM cars", token: newToken).status == 200 })
            #expect(try await Self.execute(s, "SELECT * FROM cars", token: oldToken).status == 200)
            try dir.write("jwks.json", TestSigningKey.jwks([new]))
            var refused = try await Self.execute(s, "SELECT * FROM cars", token: oldToken)
            #expect(try await eventually {
                refused = try await Self.execute(s, "SELECT * FROM cars", token: oldToken)
                return refused.status == 401
            })
            #expect(refused.description?.contains("2026-01") == true, "\(refused.text)")
            #expect(try await Self.execute(s, "SELECT * FROM cars", token: newToken).status == 200)
        }
    }
}

extension Value {
    /// The element count of an array value (nil for anything else).
    var arrayCount: Int? {
        if case .array(let items) = self { return items.count }
        return nil
    }
}
