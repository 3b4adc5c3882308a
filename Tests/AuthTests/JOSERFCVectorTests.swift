import Testing
import Values
@testable import Auth

/// The published examples: RFC 7515 A.2 (RS256) and A.3 (ES256), RFC 8037 A.4 (Ed25519), with
/// their public keys as given in the RFCs. A.2 and A.3 sign the A.1 claims (`iss` joe, `exp`
/// 1300819380); RFC 8037's payload is not JSON, so it is checked at the signature.
@Suite struct JOSERFCVectorTests {
    static let claims = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    static let rs256Token = "eyJhbGciOiJSUzI1NiJ9." + claims + "." +
        "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4" +
        "BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqv" +
        "hJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
    static let rsaJWK = #"{"kty":"RSA","e":"AQAB","n":"ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ"}"#
    static let es256Token = "eyJhbGciOiJFUzI1NiJ9." + claims + "." +
        "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    static let ecJWK = #"{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#
    static let ed25519Token = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc." +
        "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
    static let okpJWK = #"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#

    static func key(_ jwk: String) throws -> JWSVerificationKey { try JWKSet.key(JSON.parse(jwk)) }

    static func signatureVerifies(_ token: String, _ key: JWSVerificationKey) throws -> Bool {
        let jws = try JWSCompact.parse(token, maxBytes: JWKSVerifier.maxTokenBytes).get()
        return jws.algorithm == key.algorithm && key.verifies(jws.signingInput, signature: jws.signature)
    }

    @Test func rfc7515_A2_A3_andRfc8037_A4() throws {
        let rsa = try Self.key(Self.rsaJWK), ec = try Self.key(Self.ecJWK), ed = try Self.key(Self.okpJWK)
        #expect(try Self.signatureVerifies(Self.rs256Token, rsa))
        #expect(try Self.signatureVerifies(Self.es256Token, ec))
        #expect(try Self.signatureVerifies(Self.ed25519Token, ed))
        // Each against the others' keys: no.
        for (token, key) in [(Self.rs256Token, ec), (Self.es256Token, ed), (Self.ed25519Token, rsa), (Self.es256Token, rsa)] {
            #expect(try !Self.signatureVerifies(token, key))
        }
        // The claims of A.2/A.3 through the full verifier (a kid-less token, one key of its alg).
        let rules = JWTClaimRules(issuer: "joe", now: { 1_300_819_370 })
        for (token, key) in [(Self.rs256Token, rsa), (Self.es256Token, ec)] {
            let set = JWKSet(keys: [key])
            let jws = try JWSCompact.parse(token, maxBytes: JWKSVerifier.maxTokenBytes).get()
            let chosen = try set.key(algorithm: jws.algorithm, keyID: jws.keyID).get()
            #expect(chosen.verifies(jws.signingInput, signature: jws.signature))
            let principal = try jws.claims().flatMap(rules.check).get().principal
            #expect(principal.keyID == "jwt" && principal.read == .none)
        }
    }
}
