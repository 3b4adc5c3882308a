import COpenSSL

/// The JWS algorithms BigPeer verifies (RFC 7518 §3, RFC 8037 §3.1). Anything else, `none`
/// above all, is refused before a key is looked at.
public enum JWSAlgorithm: String, Sendable, CaseIterable {
    case hs256 = "HS256"
    case rs256 = "RS256"
    case es256 = "ES256"
    case edDSA = "EdDSA"
}

/// One verification key, bound to the single algorithm it may verify: an RSA key only RS256, a
/// P-256 key only ES256, an Ed25519 key only EdDSA, a shared secret only HS256. A token's header
/// never chooses how a key is used (RFC 8725 §2.1, §3.1): a public key is never an HMAC secret.
public final class JWSVerificationKey: @unchecked Sendable {
    // @unchecked: `publicKey` (an EVP_PKEY) and `verifyTemplate` (an EVP_MD_CTX) are built once in
    // `init` and never modified after; each verification copies the template into its own context
    // (EVP_MD_CTX_copy_ex only reads its source, taking references with atomic counts), so
    // concurrent verifications share nothing mutable. Both are freed only in deinit, when no
    // verification can still hold them.
    enum Material {
        case secret([UInt8])
        case publicKey(OpaquePointer)
    }

    public let algorithm: JWSAlgorithm
    /// The JWK `kid`, if it had one.
    public let keyID: String?
    let material: Material
    /// An EVP_MD_CTX set up once for verifying with this key; each verification copies it, which
    /// costs less than setting one up (OpenSSL 3 fetches the algorithms on every init). Read-only
    /// after `init`, like the key.
    private let verifyTemplate: OpaquePointer?

    public static let minimumRSABits: Int32 = 2048
    public static let maximumRSABits: Int32 = 8192

    init(algorithm: JWSAlgorithm, keyID: String?, material: Material) {
        self.algorithm = algorithm
        self.keyID = keyID
        self.material = material
        var template: OpaquePointer?
        if case .publicKey(let key) = material, let context = EVP_MD_CTX_new() {
            if EVP_DigestVerifyInit(context, nil, Self.digest(algorithm), nil, key) == 1 {
                template = context
            } else {
                EVP_MD_CTX_free(context)
                ERR_clear_error()
            }
        }
        verifyTemplate = template
    }

    deinit {
        EVP_MD_CTX_free(verifyTemplate)
        if case .publicKey(let key) = material { EVP_PKEY_free(key) }
    }

    private static func digest(_ algorithm: JWSAlgorithm) -> OpaquePointer? {
        algorithm == .edDSA ? nil : EVP_sha256()  // Ed25519 hashes internally (RFC 8032)
    }

    /// An HS256 key (shared secret); at least `JWTVerifier.minimumSecretBytes`.
    public static func hmac(secret: [UInt8], keyID: String? = nil) throws(JWKError) -> JWSVerificationKey {
        guard secret.count >= JWTVerifier.minimumSecretBytes else {
            throw JWKError(keyID, "an HS256 secret needs at least \(JWTVerifier.minimumSecretBytes) bytes (got \(secret.count))")
        }
        return JWSVerificationKey(algorithm: .hs256, keyID: keyID, material: .secret(secret))
    }

    /// An RS256 key from its modulus and public exponent (big-endian), 2048 to 8192 bits.
    public static func rsa(modulus: [UInt8], exponent: [UInt8], keyID: String? = nil) throws(JWKError) -> JWSVerificationKey {
        guard !exponent.isEmpty, exponent.count <= 8 else { throw JWKError(keyID, "the RSA exponent e must be 1 to 8 bytes") }
        let key = try decodePublicKey(DER.rsaPublicKeyInfo(modulus: modulus, exponent: exponent), keyID: keyID, what: "RSA")
        let bits = EVP_PKEY_get_bits(key)
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA, (minimumRSABits...maximumRSABits).contains(bits) else {
            EVP_PKEY_free(key)
            throw JWKError(keyID, "RSA keys must have \(minimumRSABits) to \(maximumRSABits) bits (this one has \(bits))")
        }
        return JWSVerificationKey(algorithm: .rs256, keyID: keyID, material: .publicKey(key))
    }

    /// An ES256 key: a point on P-256 (OpenSSL refuses points not on the curve).
    public static func p256(x: [UInt8], y: [UInt8], keyID: String? = nil) throws(JWKError) -> JWSVerificationKey {
        guard x.count == 32, y.count == 32 else { throw JWKError(keyID, "P-256 coordinates x and y are 32 bytes each") }
        let key = try decodePublicKey(DER.p256PublicKeyInfo(x: x, y: y), keyID: keyID, what: "P-256")
        return JWSVerificationKey(algorithm: .es256, keyID: keyID, material: .publicKey(key))
    }

    /// An EdDSA key: a 32-byte Ed25519 public key (RFC 8037 §2).
    public static func ed25519(_ x: [UInt8], keyID: String? = nil) throws(JWKError) -> JWSVerificationKey {
        guard x.count == 32, let key = x.withUnsafeBufferPointer({ EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count) }) else {
            ERR_clear_error()
            throw JWKError(keyID, "an Ed25519 key x is 32 bytes")
        }
        return JWSVerificationKey(algorithm: .edDSA, keyID: keyID, material: .publicKey(key))
    }

    private static func decodePublicKey(_ der: [UInt8], keyID: String?, what: String) throws(JWKError) -> OpaquePointer {
        let decoded: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            guard let key = d2i_PUBKEY(nil, &cursor, buffer.count) else { return nil }
            return key
        }
        guard let decoded else {
            ERR_clear_error()
            throw JWKError(keyID, "not a valid \(what) public key")
        }
        return decoded
    }

    /// Whether `signature` is this key's signature of `signingInput` under `algorithm`.
    func verifies(_ signingInput: ArraySlice<UInt8>, signature: [UInt8]) -> Bool {
        switch material {
        case .secret(let secret):
            return constantTimeEqual(hmacSHA256(secret: secret, signingInput), signature)
        case .publicKey(let key):
            var encoded = signature
            switch algorithm {
            case .es256:
                // JOSE signatures are r || s, 32 bytes each (RFC 7518 §3.4); DER ones are refused.
                guard signature.count == 64 else { return false }
                encoded = DER.ecdsaSignature(raw: signature)
            case .edDSA:
                guard signature.count == 64 else { return false }
            case .rs256, .hs256:
                break
            }
            let ok = digestVerify(key, signingInput, encoded)
            // A failed verification leaves errors on this thread's queue, which TLS on the same
            // thread would otherwise read as its own (SSL_get_error consults it).
            if !ok { ERR_clear_error() }
            return ok
        }
    }

    private func digestVerify(_ key: OpaquePointer, _ message: ArraySlice<UInt8>, _ signature: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        if verifyTemplate == nil || EVP_MD_CTX_copy_ex(context, verifyTemplate) != 1 {
            ERR_clear_error()
            EVP_MD_CTX_reset(context)
            guard EVP_DigestVerifyInit(context, nil, Self.digest(algorithm), nil, key) == 1 else { return false }
        }
        return message.withUnsafeBufferPointer { m in
            signature.withUnsafeBufferPointer { s in
                EVP_DigestVerify(context, s.baseAddress, s.count, m.baseAddress, m.count) == 1
            }
        }
    }
}

func hmacSHA256(secret: [UInt8], _ message: ArraySlice<UInt8>) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
    var length: UInt32 = 0
    secret.withUnsafeBufferPointer { key in
        message.withUnsafeBufferPointer { m in
            _ = HMAC(EVP_sha256(), key.baseAddress, Int32(key.count), m.baseAddress, m.count, &out, &length)
        }
    }
    return Array(out.prefix(Int(length)))
}

/// A JWK or JWKS that cannot be used, and which key (by `kid`) it was about.
public struct JWKError: Error, Sendable, Equatable, CustomStringConvertible {
    public var keyID: String?
    public var reason: String
    public init(_ keyID: String?, _ reason: String) {
        self.keyID = keyID
        self.reason = reason
    }
    public var description: String { keyID.map { "JWK \"\($0)\": \(reason)" } ?? "JWK: \(reason)" }
}
