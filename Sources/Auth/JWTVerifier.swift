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
    public var rules: JWTClaimRules
    public var issuer: String? {
        get { rules.issuer }
        set { rules.issuer = newValue }
    }
    public var audience: String? {
        get { rules.audience }
        set { rules.audience = newValue }
    }
    public var leewaySeconds: Int64 {
        get { rules.leewaySeconds }
        set { rules.leewaySeconds = newValue }
    }

    public init(secret: [UInt8], issuer: String? = nil, audience: String? = nil,
                now: @escaping @Sendable () -> Int64 = JWTVerifier.wallClockSeconds) throws(JWTError) {
        guard secret.count >= Self.minimumSecretBytes else { throw .secretTooShort(secret.count) }
        self.secret = secret
        rules = JWTClaimRules(issuer: issuer, audience: audience, now: now)
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
        JWSCompact.parse(token, maxBytes: Self.maxTokenBytes).flatMap(verify)
    }

    /// `verifyWithExpiry` of a token already split and decoded.
    func verify(_ jws: JWSCompact) -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        guard jws.algorithm == .hs256 else { return .failure(.unsupportedAlgorithm(JSON.string(.string(jws.algorithm.rawValue)))) }
        guard constantTimeEqual(hmacSHA256(Array(jws.signingInput)), jws.signature) else { return .failure(.badSignature) }
        return jws.claims().flatMap(rules.check)
    }

    func hmacSHA256(_ message: [UInt8]) -> [UInt8] {
        Auth.hmacSHA256(secret: secret, message[...])
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

public enum JWTError: Error, Sendable, Hashable, CustomStringConvertible {
    case secretTooShort(Int)
    case malformed(String)
    case unsupportedAlgorithm(String)
    case badSignature
    case expired
    case notYetValid
    case wrongIssuer
    case wrongAudience
    /// No key in the key set has this `kid` (nil: the token has none and no key fits its `alg`).
    case unknownKey(String?)
    /// The token's `alg` is not the one algorithm its key may verify (alg confusion, RFC 8725 §2.1).
    case algorithmNotAllowedForKey(String, keyID: String?)
    /// The key set could not be loaded, so no token can be verified (try again later).
    case keysUnavailable(String)
    /// The server is configured with no way to verify this token (no `--jwks`, or no
    /// `--jwt-secret-file` for an HS256 token).
    case notAccepted(String)

    public var description: String {
        switch self {
        case .secretTooShort(let n): "the JWT secret must be at least \(JWTVerifier.minimumSecretBytes) bytes (got \(n))"
        case .malformed(let why): "malformed JWT: \(why)"
        case .unsupportedAlgorithm(let alg): "JWT algorithm \(alg) is not accepted"
        case .badSignature: "the JWT signature does not verify"
        case .expired: "the JWT has expired"
        case .notYetValid: "the JWT is not valid yet"
        case .wrongIssuer: "the JWT issuer is not accepted"
        case .wrongAudience: "the JWT audience is not accepted"
        case .unknownKey(let kid): kid.map { "no JWT verification key has kid \"\($0)\"" } ?? "the JWT has no kid and no single key fits its alg"
        case .algorithmNotAllowedForKey(let alg, let kid): "JWT algorithm \(alg) may not be used with key \(kid.map { "\"\($0)\"" } ?? "(no kid)")"
        case .keysUnavailable(let why): "the JWT verification keys are unavailable: \(why)"
        case .notAccepted(let why): "this server does not accept this JWT: \(why)"
        }
    }
}
