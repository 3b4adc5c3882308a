import Values

/// A token in JWS compact serialization (RFC 7515 §7.1), split and decoded but not yet verified:
/// `base64url(header) "." base64url(payload) "." base64url(signature)`.
///
/// Refused here: tokens over the size bound, anything but three parts (JWE, unsigned tokens),
/// base64url with padding or characters outside its alphabet, a header that is not a JSON object
/// (or has duplicate keys), `crit`, a `typ` other than JWT, and an `alg` not in `JWSAlgorithm`.
struct JWSCompact {
    var algorithm: JWSAlgorithm
    var keyID: String?
    /// `header "." payload`, the bytes the signature covers.
    var signingInput: ArraySlice<UInt8>
    var payload: [UInt8]
    var signature: [UInt8]

    static func parse(_ token: String, maxBytes: Int) -> Result<JWSCompact, JWTError> {
        let bytes = Array(token.utf8)
        guard bytes.count <= maxBytes else { return .failure(.malformed("token longer than \(maxBytes) bytes")) }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(.malformed("a JWT has three dot-separated parts (JWE and unsigned tokens are not accepted)")) }
        guard let headerJSON = Base64.decode(parts[0], .url), let payload = Base64.decode(parts[1], .url),
              let signature = Base64.decode(parts[2], .url) else {
            return .failure(.malformed("a part is not base64url without padding"))
        }
        guard case .object(let header)? = try? JSON.parse(headerJSON) else { return .failure(.malformed("the header is not a JSON object")) }
        guard case .string(let name)? = header["alg"], let algorithm = JWSAlgorithm(rawValue: name) else {
            return .failure(.unsupportedAlgorithm(header["alg"].map { JSON.string($0) } ?? "missing"))
        }
        if let typ = header["typ"], typ != .string("JWT") { return .failure(.malformed("typ must be JWT")) }
        if header["crit"] != nil { return .failure(.malformed("crit header parameters are not supported")) }
        var keyID: String?
        switch header["kid"] {
        case nil: break
        case .string(let kid)?: keyID = kid
        default: return .failure(.malformed("kid must be a string"))
        }
        return .success(JWSCompact(algorithm: algorithm, keyID: keyID, signingInput: bytes[0..<(parts[0].count + 1 + parts[1].count)],
                                   payload: payload, signature: signature))
    }

    /// The payload as a claims object; only to be called once the signature verified.
    func claims() -> Result<[String: Value], JWTError> {
        guard case .object(let claims)? = try? JSON.parse(payload) else { return .failure(.malformed("the claims are not a JSON object")) }
        return .success(claims)
    }
}
