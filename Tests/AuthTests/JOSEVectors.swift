import BigPeerTestSupport
import Testing
import Values
@testable import Auth

/// Known-answer vectors made with Python's `cryptography` (OpenSSL underneath, but its own JOSE
/// encoding): an RSA-2048 pair (rsa-1, rsa-2), a P-256 key (ec-1), an Ed25519 key (ed-1), each
/// signing the same claims; a 1024-bit RSA key that must be refused; rsa-1's public key as PEM.
enum JOSEVectors {
    static let claims: [String: Value] = ["sub": "tablet-7", "iss": "https://id.example", "aud": "bigpeer",
                                          "exp": 2_000_000_000, "iat": 1_700_000_000, "read": "*", "write": ["orders"]]
    static let now: Int64 = 1_800_000_000
    static let rsa1Token = #"eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.LJDICJqpMNDSvJMPWApLbZw9ykKfNWH9JferqJO9Q6xKzyNqVs-iEVegCX0qua3RGxrFhUFm9nAi3quuJA1_9zZvNFZHiZB5cZwet-0w4WKNCPQJtC9NkvQxk6iy425xiTPjhoyEBc36XoBBM-r7zB6XPAaQC5_9gQhuOa4_j3wOznKZ2hYzTRgn3qQDqh5U-9-74gcy-8hPYNXAHqWUlPBdzo5M7XXccgNWxfsXJ6K18iSlIsAIfxsgNP3MeltqHdPgxFFXpSmtGi2IoLkaDhy3otjUyd0J5mxg24Qf0Rfys1H-ikO8kftTmi3qhvzFNUy_MaWNuchTtnxbS_vJvA"#
    static let rsa2Token = #"eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0yIiwidHlwIjoiSldUIn0.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.S9gkn9OwhigUY4yvjMIMVqyLBZHCukd6dv_gorX5P9zCk6eLPO6rmpXf949zLEFWYn7bwAm4TPOd48YrNHb0E4FrKm57IqnGuDMHsB08jxSuFQPL0VPvmJZghlp8Hr2WqxPl3aKWTXP1JFZk-1Cj49iQrx5tYhQJZlcj6eg5Zj1G1z59W8VajRWdPDZP2ClxBjUjXSpAEkSsMsj77HD10NP1dQ2V5m-1ohs9C3o5UzV-JszztJHhbWVBW3ebYnLrL-TAbhYl141l41PMu9SkptQSQvC4YY_ZiE0081H85ePPKzgCL51EtTWZJ_nFYJu5Fp3CWdM-qo7Lu_IqkbrtQw"#
    static let ec1Token = #"eyJhbGciOiJFUzI1NiIsImtpZCI6ImVjLTEiLCJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.zN766aPxRME-D4y2VAItA74HJ79kAA8w3OXjiP3tJG_lxgzUztyZc7qYwLVgjswBu5R5ViposGMg6UA_UQ7yjQ"#
    static let ed1Token = #"eyJhbGciOiJFZERTQSIsImtpZCI6ImVkLTEiLCJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ0YWJsZXQtNyIsImlzcyI6Imh0dHBzOi8vaWQuZXhhbXBsZSIsImF1ZCI6ImJpZ3BlZXIiLCJleHAiOjIwMDAwMDAwMDAsImlhdCI6MTcwMDAwMDAwMCwicmVhZCI6IioiLCJ3cml0ZSI6WyJvcmRlcnMiXX0.aowrlj6hGKClaVDF1eG7hYk-rosaNI3O3Yj82_HmxUUmNC4cCCYeJ95PSITccmB1TgnKoHr7eLTrF6qHy82JDQ"#
    static let rsa1024JWK = #"{"kty": "RSA", "kid": "small", "n": "414IN9nEnbB-xVN1vJEF5fcLSuKE4HyYPusCVhkKR40tPJAwmAE4II7448cs8ouZrWlr8S_9n23jkvUX23q_u2vuNPrDC3LwgRXxlgTr8LNwtmft6TbVQcnYRkCy-u6kMMOQX0xFaB8o3YLLHSqwdQVaDx58I7p2zJTYAIPSD_U", "e": "AQAB"}"#
    static let jwks = #"{"keys": [{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": "o5yZpmfIJg9K9oxPVuvgQ3YvC3k1Addc82Wp6km8ofXKoHhBbsEPWHk_mG127VhN0eAgQGXgbiA01PAhtShI7W4oqbF6sX5YeWIO9VqVv_oafqEUDP5J4YWjN0IgW011AsrvMjKGddbHfjvRQIaBocG_SKVOw_AAwFI25PZ_A4n9d2fCRKhrOBtIY4L8Sz7DvdRxG3GuFgqfBE7AtBs9v51mC9Eo-e0MKSkXC_hUn4Z2uCN4PF-FGYNhfqtoD4JouSu66OTa1wj1yuxzsxnz1QYEZFqpunRMgeq7q-Z9hJ4i83VL6TFyTu3yJWckfXgPlkBZydnci6RXY1PKmiXoPQ", "e": "AQAB"}, {"kty": "RSA", "kid": "rsa-2", "use": "sig", "alg": "RS256", "n": "ljuQvL5tYn5SeKxJpk0cCs53zWUiPyt9MIc-kIIY1ugS5QPkH8FRhNruKmIoMeNZ_ywcjstsioQ5R3cNioOHpqtCJgEQf0kJob2uOWYaey_6mthN6SfoyD5HalXkQeOIt6JCSEkmTwoHfgF1hb0bWEeYybYAmEvzEsnw4luGKsTZS1N4P2vYSYtpbA2f-JVGMnsuGzZM-iwqjShNVImDEvjGZ6v6rhAv5LX3OQBo8KfX9joB-Z5fxLKeNjyX3G93Shw4GoKqnZx0wV7-b4Niw610GRcuANb5W9uO7unOQFCBuQmTX-h5zUAejLYQ7GOsmbGSMt4g_mS8M_ymbROzWQ", "e": "AQAB"}, {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": "pg64DkAm5hgYGfXt-7FnjY8h-JNGQGEMV4NmK2yhB_M", "y": "8AskzUj_UhT7kq_nt2zWZjTVFyuTTtQLfVxN6yUo7NY"}, {"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": "3eov-AsIC54jbkSObQpHa8z5OTM8-N0hqIcsvaunQDI"}]}"#
    static let rsa1PEM = """
    -----BEGIN PUBLIC KEY-----
    MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAo5yZpmfIJg9K9oxPVuvg
    Q3YvC3k1Addc82Wp6km8ofXKoHhBbsEPWHk/mG127VhN0eAgQGXgbiA01PAhtShI
    7W4oqbF6sX5YeWIO9VqVv/oafqEUDP5J4YWjN0IgW011AsrvMjKGddbHfjvRQIaB
    ocG/SKVOw/AAwFI25PZ/A4n9d2fCRKhrOBtIY4L8Sz7DvdRxG3GuFgqfBE7AtBs9
    v51mC9Eo+e0MKSkXC/hUn4Z2uCN4PF+FGYNhfqtoD4JouSu66OTa1wj1yuxzsxnz
    1QYEZFqpunRMgeq7q+Z9hJ4i83VL6TFyTu3yJWckfXgPlkBZydnci6RXY1PKmiXo
    PQIDAQAB
    -----END PUBLIC KEY-----
    """

    static func set(_ document: String, allowSymmetricKeys: Bool = false) throws -> JWKSet {
        var limits = JWKSet.Limits()
        limits.allowSymmetricKeys = allowSymmetricKeys
        return try JWKSet.parse(Array(document.utf8), limits: limits)
    }

    /// The keys of `jwks` whose kid is in `kids`, as a JWKS document.
    static func document(_ kids: Set<String>) throws -> String {
        guard case .object(let root) = try JSON.parse(jwks), case .array(let keys)? = root["keys"] else { throw JWKError(nil, "vector") }
        let kept = keys.filter { if case .object(let k) = $0, case .string(let kid)? = k["kid"] { kids.contains(kid) } else { false } }
        return String(decoding: JSON.serialize(.object(["keys": .array(kept)])), as: UTF8.self)
    }

    /// A compact JWS with this header, signed with HMAC-SHA256 under `secret` whatever the header says.
    static func hmacToken(header: String, payload: String, secret: [UInt8]) -> String {
        let input = Base64.encode(Array(header.utf8), .url) + "." + Base64.encode(Array(payload.utf8), .url)
        return input + "." + Base64.encode(hmacSHA256(secret: secret, Array(input.utf8)[...]), .url)
    }
}
