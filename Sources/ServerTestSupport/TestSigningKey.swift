import COpenSSL
import Values
import Auth

/// A key pair made fresh with OpenSSL for one JWS algorithm: signs test tokens with any header
/// and claims, and describes its public half as a JWK (what an identity provider publishes).
public final class TestSigningKey: @unchecked Sendable {
    // @unchecked: `key` is made in `init`, only read afterwards (each signature makes its own
    // EVP_MD_CTX), and freed in deinit.
    public let algorithm: JWSAlgorithm
    public let kid: String
    private let key: OpaquePointer

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public init(_ algorithm: JWSAlgorithm, kid: String) throws {
        self.algorithm = algorithm
        self.kid = kid
        let type: Int32 = switch algorithm {
        case .rs256: EVP_PKEY_RSA
        case .es256: EVP_PKEY_EC
        case .edDSA: EVP_PKEY_ED25519
        case .hs256: throw Failure(description: "HS256 has no key pair")
        }
        guard let context = EVP_PKEY_CTX_new_id(type, nil) else { throw Failure(description: "EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw Failure(description: "keygen_init") }
        if algorithm == .rs256 { guard EVP_PKEY_CTX_set_rsa_keygen_bits(context, 2048) == 1 else { throw Failure(description: "rsa bits") } }
        if algorithm == .es256 {
            guard EVP_PKEY_CTX_set_ec_paramgen_curve_nid(context, NID_X9_62_prime256v1) == 1 else { throw Failure(description: "curve") }
        }
        var made: OpaquePointer?
        guard EVP_PKEY_keygen(context, &made) == 1, let made else { throw Failure(description: "keygen") }
        key = made
    }

    deinit { EVP_PKEY_free(key) }

    /// The public key as a JWK (`kid` and `alg` included).
    public var jwk: Value {
        var fields: [String: Value] = ["kid": .string(kid), "alg": .string(algorithm.rawValue), "use": "sig"]
        switch algorithm {
        case .rs256:
            fields["kty"] = "RSA"
            fields["n"] = .string(Base64.encode(bignum("n", width: nil), .url))
            fields["e"] = .string(Base64.encode(bignum("e", width: nil), .url))
        case .es256:
            fields["kty"] = "EC"
            fields["crv"] = "P-256"
            fields["x"] = .string(Base64.encode(bignum("qx", width: 32), .url))
            fields["y"] = .string(Base64.encode(bignum("qy", width: 32), .url))
        case .edDSA:
            fields["kty"] = "OKP"
            fields["crv"] = "Ed25519"
            var raw = [UInt8](repeating: 0, count: 32)
            var length = raw.count
            _ = EVP_PKEY_get_raw_public_key(key, &raw, &length)
            fields["x"] = .string(Base64.encode(Array(raw.prefix(length)), .url))
        case .hs256:
            break
        }
        return .object(fields)
    }

    private func bignum(_ name: String, width: Int?) -> [UInt8] {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, name, &bn) == 1, let bn else { return [] }
        defer { BN_free(bn) }
        var out = [UInt8](repeating: 0, count: width ?? Int((BN_num_bits(bn) + 7) / 8))
        _ = BN_bn2binpad(bn, &out, Int32(out.count))
        return out
    }

    /// A JWS compact token of `claims`, signed by this key, with `header` fields added to (or
    /// replacing) `alg`, `kid` and `typ`.
    public func sign(_ claims: [String: Value], header: [String: Value] = [:]) -> String {
        var h: [String: Value] = ["alg": .string(algorithm.rawValue), "kid": .string(kid), "typ": "JWT"]
        for (k, v) in header { h[k] = v }
        let input = Base64.encode(JSON.serialize(.object(h)), .url) + "." + Base64.encode(JSON.serialize(.object(claims)), .url)
        return input + "." + Base64.encode(signature(Array(input.utf8)), .url)
    }

    /// The JOSE signature of `message` (ES256: r || s, not DER).
    public func signature(_ message: [UInt8]) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { return [] }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, algorithm == .edDSA ? nil : EVP_sha256(), nil, key) == 1 else { return [] }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { return [] }
        var out = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &out, &length, message, message.count) == 1 else { return [] }
        out = Array(out.prefix(length))
        guard algorithm == .es256 else { return out }
        var cursor: UnsafePointer<UInt8>? = nil
        return out.withUnsafeBufferPointer { der -> [UInt8] in
            cursor = der.baseAddress
            guard let parsed = d2i_ECDSA_SIG(nil, &cursor, der.count) else { return [] }
            defer { ECDSA_SIG_free(parsed) }
            var r = [UInt8](repeating: 0, count: 32), s = [UInt8](repeating: 0, count: 32)
            _ = BN_bn2binpad(ECDSA_SIG_get0_r(parsed), &r, 32)
            _ = BN_bn2binpad(ECDSA_SIG_get0_s(parsed), &s, 32)
            return r + s
        }
    }

    /// A JWKS document of these keys' public halves.
    public static func jwks(_ keys: [TestSigningKey]) -> String {
        String(decoding: JSON.serialize(.object(["keys": .array(keys.map(\.jwk))])), as: UTF8.self)
    }

    /// The standard claims of a token for `audience` from `issuer`, valid for `ttl` seconds.
    public static func claims(ttl: Int64, read: Value = "*", write: Value = "*", subject: String = "tablet-7",
                       issuer: String = "https://id.test", audience: String = "bigpeer") -> [String: Value] {
        let now = JWTVerifier.wallClockSeconds()
        return ["sub": .string(subject), "iss": .string(issuer), "aud": .string(audience), "iat": .int(now), "exp": .int(now + ttl),
                "read": read, "write": write]
    }
}
