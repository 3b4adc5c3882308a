import COpenSSL
import Glibc
import Values

/// Verifies JSON Web Tokens (RFC 7519) signed with HMAC-SHA256 (`HS256`, RFC 7518 §3.2) under one
/// shared secret from the server's configuration, and turns their claims into a `Principal`.
///
///     base64url(header) "." base64url(claims) "." base64url(HMAC-SHA256(secret, header "." claims))
///
/// Accepted header: `{"alg":"HS256"}` (`typ` may be "JWT"; any other `alg`, including "none", is
/// refused — RFC 8725 §3.1: the algorithm is fixed by the verifier, never chosen by the token).
/// Claims: `exp` (required, NumericDate seconds), `nbf` and `iat` (optional; `iat` may not be in the
/// future), `iss`/`aud` when the verifier is configured with them, `sub` (optional, logged as the
/// principal's id), and BigPeer's permission claims `read` and `write`: `"*"` for every collection
/// or an array of collection names (absent: none). Clock skew of up to `leeway` is tolerated.
///
/// The signature is checked before anything in the claims is trusted, with a constant-time compare.
public struct JWTVerifier: Sendable {
    /// HS256 secrets shorter than the hash output weaken the MAC (RFC 7518 §3.2 requires ≥ 256 bits).
    public static let minimumSecretBytes = 32
    /// Tokens longer than this are refused before any decoding (headers and hello fields are bounded anyway).
    public static let maxTokenBytes = 8192

    let secret: [UInt8]
    public var issuer: String?
    public var audience: String?
    public var leewaySeconds: Int64 = 60
    /// Wall clock in seconds since the epoch (injectable for tests).
    let now: @Sendable () -> Int64

    public init(secret: [UInt8], issuer: String? = nil, audience: String? = nil,
                now: @escaping @Sendable () -> Int64 = JWTVerifier.wallClockSeconds) throws(JWTError) {
        guard secret.count >= Self.minimumSecretBytes else { throw .secretTooShort(secret.count) }
        self.secret = secret
        self.issuer = issuer
        self.audience = audience
        self.now = now
    }

    public static let wallClockSeconds: @Sendable () -> Int64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec)
    }

    /// The principal a valid token describes, or why the token is refused.
    public func verify(_ token: String) -> Result<Principal, JWTError> {
        verifyWithExpiry(token).map(\.principal)
    }

    /// `verify`, and the first second (since the epoch) at which the token is refused as expired:
    /// `exp + leeway + 1` (a sync session ends then: docs/PROTOCOL.md §4.1.1).
    public func verifyWithExpiry(_ token: String) -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maxTokenBytes else { return .failure(.malformed("token longer than \(Self.maxTokenBytes) bytes")) }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .failure(.malformed("a JWT has three dot-separated parts (JWE and unsigned tokens are not accepted)")) }
        guard let headerJSON = Base64.decode(parts[0], .url), let claimsJSON = Base64.decode(parts[1], .url),
              let signature = Base64.decode(parts[2], .url) else {
            return .failure(.malformed("a part is not base64url without padding"))
        }
        guard case .object(let header)? = try? JSON.parse(headerJSON) else { return .failure(.malformed("the header is not a JSON object")) }
        guard header["alg"] == .string("HS256") else {
            return .failure(.unsupportedAlgorithm(header["alg"].map { JSON.string($0) } ?? "missing"))
        }
        if let typ = header["typ"], typ != .string("JWT") { return .failure(.malformed("typ must be JWT")) }
        if header["crit"] != nil { return .failure(.malformed("crit header parameters are not supported")) }
        let signed = Array(bytes[0..<(parts[0].count + 1 + parts[1].count)])
        guard constantTimeEqual(hmacSHA256(signed), signature) else { return .failure(.badSignature) }

        guard case .object(let claims)? = try? JSON.parse(claimsJSON) else { return .failure(.malformed("the claims are not a JSON object")) }
        let t = now()
        guard let exp = Self.numericDate(claims["exp"]) else { return .failure(.malformed("exp (expiry, seconds since the epoch) is required")) }
        if t > exp + leewaySeconds { return .failure(.expired) }
        if let nbfValue = claims["nbf"] {
            guard let nbf = Self.numericDate(nbfValue) else { return .failure(.malformed("nbf must be a number")) }
            if t + leewaySeconds < nbf { return .failure(.notYetValid) }
        }
        if let iatValue = claims["iat"] {
            guard let iat = Self.numericDate(iatValue) else { return .failure(.malformed("iat must be a number")) }
            if t + leewaySeconds < iat { return .failure(.notYetValid) }
        }
        if let issuer, claims["iss"] != .string(issuer) { return .failure(.wrongIssuer) }
        if let audience {
            switch claims["aud"] {
            case .string(let a)? where a == audience: break
            case .array(let list)? where list.contains(.string(audience)): break
            default: return .failure(.wrongAudience)
            }
        }
        let read: CollectionScope, write: CollectionScope
        switch (Self.scope(claims["read"]), Self.scope(claims["write"])) {
        case (.some(let r), .some(let w)): (read, write) = (r, w)
        default: return .failure(.malformed(#"read and write must be "*" or an array of collection names"#))
        }
        var subject: String?
        if case .string(let sub)? = claims["sub"] { subject = sub }
        let (end, overflow) = exp.addingReportingOverflow(leewaySeconds + 1)
        return .success((Principal(keyID: subject.map { "jwt:" + $0 } ?? "jwt", read: read, write: write), overflow ? Int64.max : end))
    }

    /// NumericDate (RFC 7519 §2): seconds, possibly fractional; nil for anything else.
    static func numericDate(_ v: Value?) -> Int64? {
        switch v {
        case .int(let i)?: i
        case .double(let d)? where d.isFinite && abs(d) < 1e15: Int64(d)
        default: nil
        }
    }

    /// `"*"` → all, array of strings → only those, absent → none; nil for anything else.
    static func scope(_ v: Value?) -> CollectionScope? {
        switch v {
        case nil: return CollectionScope.none
        case .string("*")?: return CollectionScope.all
        case .array(let items)?:
            var names = Set<String>()
            for item in items {
                // A name two spellings could match is refused, not guessed at (Values/ExactText.swift).
                guard case .string(let name) = item, NameRules.problem(name) == nil else { return nil }
                names.insert(name)
            }
            return .only(names)
        default: return nil
        }
    }

    func hmacSHA256(_ message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        secret.withUnsafeBufferPointer { key in
            message.withUnsafeBufferPointer { m in
                _ = HMAC(EVP_sha256(), key.baseAddress, Int32(key.count), m.baseAddress, m.count, &out, &length)
            }
        }
        return Array(out.prefix(Int(length)))
    }

    /// Creates a token (tests, tooling and the `bigpeer token` command); the claims are written as given.
    public func sign(claims: [String: Value]) -> String {
        let header = Base64.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8), .url)
        let body = Base64.encode(JSON.serialize(.object(claims)), .url)
        let signingInput = header + "." + body
        return signingInput + "." + Base64.encode(hmacSHA256(Array(signingInput.utf8)), .url)
    }
}

func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count, !a.isEmpty else { return false }
    return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, x.count) == 0 } }
}

public enum JWTError: Error, Sendable, Equatable, CustomStringConvertible {
    case secretTooShort(Int)
    case malformed(String)
    case unsupportedAlgorithm(String)
    case badSignature
    case expired
    case notYetValid
    case wrongIssuer
    case wrongAudience

    public var description: String {
        switch self {
        case .secretTooShort(let n): "the JWT secret must be at least \(JWTVerifier.minimumSecretBytes) bytes (got \(n))"
        case .malformed(let why): "malformed JWT: \(why)"
        case .unsupportedAlgorithm(let alg): "JWT algorithm \(alg) is not accepted (only HS256)"
        case .badSignature: "the JWT signature does not verify"
        case .expired: "the JWT has expired"
        case .notYetValid: "the JWT is not valid yet"
        case .wrongIssuer: "the JWT issuer is not accepted"
        case .wrongAudience: "the JWT audience is not accepted"
        }
    }
}
