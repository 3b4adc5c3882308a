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
    }
}
