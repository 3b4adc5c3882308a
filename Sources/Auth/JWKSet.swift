import Values

/// A JSON Web Key Set (RFC 7517 §5): the verification keys a token may name by `kid`.
///
/// Keys BigPeer cannot verify with (encryption keys, other curves or algorithms) are skipped with
/// the reason kept in `skipped`, as RFC 7517 §5 asks; a key of a supported type that is malformed
/// or out of bounds is skipped too, so one bad key in a provider's set does not lock everyone out.
public struct JWKSet: Sendable {
    public struct Limits: Sendable {
        public var maxDocumentBytes = 256 * 1024
        public var maxKeys = 64
        /// `kty: "oct"` (HS256 shared secrets) only when the operator asks: a JWKS usually comes
        /// from an identity provider over the network, and a secret there is public.
        public var allowSymmetricKeys = false
        public init() {}
    }

    public private(set) var keys: [JWSVerificationKey]
    /// The keys left out, and why (for the operator's log).
    public private(set) var skipped: [JWKError]

    public init(keys: [JWSVerificationKey], skipped: [JWKError] = []) {
        self.keys = keys
        self.skipped = skipped
    }

    /// Parses a JWKS document.
    public static func parse(_ document: [UInt8], limits: Limits = Limits()) throws(JWKError) -> JWKSet {
        guard document.count <= limits.maxDocumentBytes else { throw JWKError(nil, "the JWKS document is larger than \(limits.maxDocumentBytes) bytes") }
        let parsed: Value
        do { parsed = try JSON.parse(document) } catch { throw JWKError(nil, "the JWKS document is not JSON: \(error)") }
        guard case .object(let root) = parsed, case .array(let entries)? = root["keys"] else {
            throw JWKError(nil, #"a JWKS document is an object with a "keys" array"#)
        }
        guard entries.count <= limits.maxKeys else { throw JWKError(nil, "the JWKS has \(entries.count) keys (at most \(limits.maxKeys))") }
        var set = JWKSet(keys: [])
        for entry in entries {
            do {
                set.keys.append(try key(entry, limits: limits))
            } catch {
                set.skipped.append(error)
            }
        }
        return set
    }

    /// One JWK (RFC 7517 §4, RFC 7518 §6, RFC 8037 §2) as the one key it describes.
    public static func key(_ jwk: Value, limits: Limits = Limits()) throws(JWKError) -> JWSVerificationKey {
        guard case .object(let fields) = jwk else { throw JWKError(nil, "a JWK is a JSON object") }
        func string(_ name: String) -> String? {
            if case .string(let s)? = fields[name] { return s }
            return nil
        }
        let kid = string("kid")
        if fields["kid"] != nil, kid == nil { throw JWKError(nil, "kid must be a string") }
        func bytes(_ name: String) throws(JWKError) -> [UInt8] {
            guard let text = string(name), let decoded = Base64.decode(text.utf8, .url), !decoded.isEmpty else {
                throw JWKError(kid, "\(name) must be non-empty base64url without padding")
            }
            return decoded
        }
        if let use = fields["use"], use != .string("sig") { throw JWKError(kid, "use is not sig") }
        if let ops = fields["key_ops"] {
            guard case .array(let list) = ops, list.contains(.string("verify")) else { throw JWKError(kid, "key_ops does not include verify") }
        }
        let key: JWSVerificationKey
        switch (string("kty"), string("crv")) {
        case ("RSA"?, _):
            key = try .rsa(modulus: bytes("n"), exponent: bytes("e"), keyID: kid)
        case ("EC"?, "P-256"?):
            key = try .p256(x: bytes("x"), y: bytes("y"), keyID: kid)
        case ("OKP"?, "Ed25519"?):
            key = try .ed25519(bytes("x"), keyID: kid)
        case ("oct"?, _):
            guard limits.allowSymmetricKeys else { throw JWKError(kid, "oct (shared secret) keys are not allowed in this JWKS") }
            key = try .hmac(secret: bytes("k"), keyID: kid)
        case (let kty, let crv):
            throw JWKError(kid, "unsupported key type \(kty ?? "(missing kty)")\(crv.map { " on curve " + $0 } ?? "")")
        }
        // A JWK's alg, when present, must be the one its key type allows (RFC 7517 §4.4).
        if let alg = fields["alg"], alg != .string(key.algorithm.rawValue) {
            throw JWKError(kid, "alg \(JSON.string(alg)) does not fit a \(string("kty") ?? "") key (only \(key.algorithm.rawValue))")
        }
        return key
    }

    /// The key that must verify a token with this `alg` and `kid`. A `kid` picks the key of that id
    /// (which must be bound to `alg`); without a `kid` the token matches only when exactly one key
    /// in the set verifies `alg`.
    public func key(algorithm: JWSAlgorithm, keyID: String?) -> Result<JWSVerificationKey, JWTError> {
        if let keyID {
            // One kid may name keys of several types (a provider publishing RSA and EC twins).
            let named = keys.filter { $0.keyID == keyID }
            guard !named.isEmpty else { return .failure(.unknownKey(keyID)) }
            guard let key = named.first(where: { $0.algorithm == algorithm }) else {
                return .failure(.algorithmNotAllowedForKey(algorithm.rawValue, keyID: keyID))
            }
            return .success(key)
        }
        let candidates = keys.filter { $0.algorithm == algorithm }
        switch candidates.count {
        case 0: return .failure(.unknownKey(nil))
        case 1: return .success(candidates[0])
        default: return .failure(.malformed("the token has no kid and \(candidates.count) keys could verify \(algorithm.rawValue)"))
        }
    }
}
