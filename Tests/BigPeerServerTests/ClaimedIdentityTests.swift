import Auth
@testable import BigPeerServer
import SyncProtocol
import Testing
import Values

/// The identity a credential claims, as the per-credential limit and the audit log name it: an API
/// key's id, a JWT's `jwt:<sub>`; never anything of the secret.
@Suite struct ClaimedIdentityTests {
    @Test func keysGiveTheirID_tokensTheirSubject_andNothingElseCounts() throws {
        let key = try APIKeyToken.generate()
        #expect(ClaimedIdentity.of(authorization: "Bearer \(key.text)") == key.id)
        #expect(ClaimedIdentity.of(authorization: "bearer   \(key.text)  ") == key.id)
        #expect(ClaimedIdentity.of(.apiKey(key.text)) == key.id)

        let signer = try JWTVerifier(secret: Array("a test secret that is long enough for HS256!".utf8))
        let token = signer.sign(claims: ["sub": "tablet-7", "exp": 9_999_999_999])
        #expect(ClaimedIdentity.of(authorization: "Bearer \(token)") == "jwt:tablet-7")
        #expect(ClaimedIdentity.of(.jwt(token)) == "jwt:tablet-7")
        let long = signer.sign(claims: ["sub": .string(String(repeating: "s", count: 1000))])
        #expect(ClaimedIdentity.of(.jwt(long))?.count == 4 + 256)

        #expect(ClaimedIdentity.of(.jwt(signer.sign(claims: ["exp": 1]))) == nil, "no sub")
        #expect(ClaimedIdentity.of(.jwt(signer.sign(claims: ["sub": 7]))) == nil, "sub not a string")
        for header in [nil, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer hunter2", "Bearer a.b.c", "Bearer \(key.text.dropLast())"] {
            #expect(ClaimedIdentity.of(authorization: header) == nil, "\(header ?? "nil")")
        }
        #expect(ClaimedIdentity.of(nil) == nil)
        // Key-shaped, but its id is not lowercase hex: no identity (it could be anything).
        let forged = "bpk_" + "0123456789ABCDEF" + String(key.text.dropFirst(20))
        #expect(ClaimedIdentity.of(authorization: "Bearer \(forged)") == nil)
    }

    /// Nothing a client chooses can start a line of its own in the audit log.
    @Test func controlCharactersAreWrittenAsEscapes() throws {
        #expect(AuthAudit.printable("a\nb\u{7F}c\td") == "a\\u{a}b\\u{7f}c\\u{9}d")
        #expect(AuthAudit.printable("plain: ü ✓") == "plain: ü ✓")
        let signer = try JWTVerifier(secret: Array("a test secret that is long enough for HS256!".utf8))
        #expect(ClaimedIdentity.of(.jwt(signer.sign(claims: ["sub": "x\nnotice fake line"]))) == "jwt:x\\u{a}notice fake line")
    }
}
