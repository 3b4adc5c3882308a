import Foundation
import Testing
import Values
@testable import Auth

/// Parsing a JWKS: what becomes a key, what is skipped and why, and the bounds.
@Suite struct JWKSetTests {
    @Test func parsesEveryKeyTypeAndSelectsByKid() throws {
        let set = try JOSEVectors.set(JOSEVectors.jwks)
        #expect(set.keys.map(\.keyID) == ["rsa-1", "rsa-2", "ec-1", "ed-1"])
        #expect(set.keys.map(\.algorithm) == [.rs256, .rs256, .es256, .edDSA])
        #expect(set.skipped.isEmpty)
        #expect(try set.key(algorithm: .es256, keyID: nil).get().keyID == "ec-1")  // the only ES256 key
        func refusal(_ result: Result<JWSVerificationKey, JWTError>) -> JWTError? {
            if case .failure(let error) = result { return error }
            return nil
        }
        #expect(refusal(set.key(algorithm: .rs256, keyID: "ec-1")) == .algorithmNotAllowedForKey("RS256", keyID: "ec-1"))
        #expect(refusal(set.key(algorithm: .hs256, keyID: nil)) == .unknownKey(nil))
        #expect(refusal(set.key(algorithm: .rs256, keyID: nil)) != nil)  // two RS256 keys, no kid
    }

    @Test func oneKidOnKeysOfTwoTypes_picksByAlgorithm() throws {
        let twins = try JOSEVectors.document(["rsa-1", "ec-1"]).replacingOccurrences(of: #""rsa-1""#, with: #""twin""#)
            .replacingOccurrences(of: #""ec-1""#, with: #""twin""#)
        let set = try JOSEVectors.set(twins)
        #expect(try set.key(algorithm: .rs256, keyID: "twin").get().algorithm == .rs256)
        #expect(try set.key(algorithm: .es256, keyID: "twin").get().algorithm == .es256)
        if case .success = set.key(algorithm: .edDSA, keyID: "twin") { Issue.record("EdDSA matched an RSA or EC key") }
    }

    @Test func skipsKeysItCannotOrMayNotUse() throws {
        let ec = #"{"kty":"EC","crv":"P-256","x":"pg64DkAm5hgYGfXt-7FnjY8h-JNGQGEMV4NmK2yhB_M","y":"8AskzUj_UhT7kq_nt2zWZjTVFyuTTtQLfVxN6yUo7NY""#
        let offCurve = #"{"kty":"EC","crv":"P-256","kid":"off","x":"pg64DkAm5hgYGfXt-7FnjY8h-JNGQGEMV4NmK2yhB_M","y":"8AskzUj_UhT7kq_nt2zWZjTVFyuTTtQLfVxN6yUo7NA"}"#
        let entries = [
            JOSEVectors.rsa1024JWK,
            ec + #","kid":"wrong-alg","alg":"RS256"}"#,
            ec + #","kid":"enc","use":"enc"}"#,
            #"{"kty":"EC","crv":"P-256","kid":"padded","x":"pg64DkAm5hgYGfXt-7FnjY8h-JNGQGEMV4NmK2yhB_M=","y":"8AskzUj_UhT7kq_nt2zWZjTVFyuTTtQLfVxN6yUo7NY"}"#,
            offCurve,
            #"{"kty":"EC","crv":"P-384","kid":"p384","x":"AA","y":"AA"}"#,
            #"{"kty":"OKP","crv":"X25519","kid":"x25519","x":"3eov-AsIC54jbkSObQpHa8z5OTM8-N0hqIcsvaunQDI"}"#,
            #"{"kty":"oct","kid":"secret","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}"#,
            ec + #","kid":"ok","alg":"ES256","key_ops":["verify"]}"#,
        ]
        let set = try JOSEVectors.set(#"{"keys":["# + entries.joined(separator: ",") + "]}")
        #expect(set.keys.map(\.keyID) == ["ok"])
        #expect(set.skipped.map(\.keyID) == ["small", "wrong-alg", "enc", "padded", "off", "p384", "x25519", "secret"])
        #expect(set.skipped[0].reason.contains("2048 to 8192 bits"))
        let allowed = try JOSEVectors.set(#"{"keys":["# + entries[7] + "]}", allowSymmetricKeys: true)
        #expect(allowed.keys.map(\.algorithm) == [.hs256])
    }

    @Test func boundsTheDocument() throws {
        var limits = JWKSet.Limits()
        limits.maxKeys = 3
        #expect(throws: JWKError.self) { try JWKSet.parse(Array(JOSEVectors.jwks.utf8), limits: limits) }
        limits = JWKSet.Limits()
        limits.maxDocumentBytes = 100
        #expect(throws: JWKError.self) { try JWKSet.parse(Array(JOSEVectors.jwks.utf8), limits: limits) }
        for bad in ["[]", #"{"keys":{}}"#, #"{"keys":[],"keys":[]}"#, "{", ""] {
            #expect(throws: JWKError.self, "\(bad)") { try JWKSet.parse(Array(bad.utf8)) }
        }
    }
}
