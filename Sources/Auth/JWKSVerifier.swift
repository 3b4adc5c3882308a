import Values

/// Verifies JWTs signed with RS256, ES256, EdDSA or (when its JWKS allows shared secrets) HS256,
/// with keys from a `JWKSSource`, and turns their claims into a `Principal` by `JWTClaimRules`.
///
/// The token's `kid` picks the key and the key fixes the algorithm (`JWKSet.key`); the signature
/// is checked before anything in the claims is trusted.
public struct JWKSVerifier: Sendable {
    /// Larger tokens are refused before any decoding (an RSA-8192 signature alone is 1.4 KiB).
    public static let maxTokenBytes = 16 * 1024

    public let source: JWKSSource
    public var rules: JWTClaimRules

    public init(source: JWKSSource, rules: JWTClaimRules = JWTClaimRules()) {
        self.source = source
        self.rules = rules
    }

    public func verify(_ token: String) async -> Result<Principal, JWTError> {
        await verifyWithExpiry(token).map(\.principal)
    }

    /// `verify`, and the first second at which the token is refused as expired (`exp + leeway + 1`).
    /// Starts a background re-read when the keys are older than the source's `maximumKeyAge`, and
    /// waits for one (rate-limited) when the token's `kid` is not among them.
    public func verifyWithExpiry(_ token: String) async -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        switch JWSCompact.parse(token, maxBytes: Self.maxTokenBytes) {
        case .success(let jws): return await verify(jws)
        case .failure(let error): return .failure(error)
        }
    }

    /// `verifyWithExpiry` of a token already split and decoded.
    func verify(_ jws: JWSCompact) async -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        var found = Self.key(for: jws, in: source)
        if source.isDue { source.refreshInBackground(.keyAge) }
        if case .failure(.unknownKey) = found {
            await source.refresh(.unknownKey)
            found = Self.key(for: jws, in: source)
        }
        return found.flatMap { verify(jws, with: $0) }
    }

    /// Verifies with the cached keys only (no fetch): for callers that cannot wait.
    public func verifyCached(_ token: String) -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        JWSCompact.parse(token, maxBytes: Self.maxTokenBytes).flatMap { jws in
            Self.key(for: jws, in: source).flatMap { verify(jws, with: $0) }
        }
    }

    private static func key(for jws: JWSCompact, in source: JWKSSource) -> Result<JWSVerificationKey, JWTError> {
        guard let keys = source.keys else { return .failure(.keysUnavailable(source.lastError?.description ?? "not loaded yet")) }
        return keys.key(algorithm: jws.algorithm, keyID: jws.keyID)
    }

    private func verify(_ jws: JWSCompact, with key: JWSVerificationKey) -> Result<(principal: Principal, refusedFrom: Int64), JWTError> {
        guard key.algorithm == jws.algorithm else { return .failure(.algorithmNotAllowedForKey(jws.algorithm.rawValue, keyID: key.keyID)) }
        guard key.verifies(jws.signingInput, signature: jws.signature) else { return .failure(.badSignature) }
        return jws.claims().flatMap(rules.check)
    }
}
