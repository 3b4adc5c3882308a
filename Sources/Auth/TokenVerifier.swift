import Synchronization
import Values

/// Every way this server verifies a JWT, behind one call that REST (`Authenticator`) and sync
/// (`hello.cred`, `auth`) share: an HS256 token goes to the shared secret (`--jwt-secret-file`)
/// when one is configured, any other token to the key set (`--jwks`). Each verifier binds its keys
/// to one algorithm, so the route taken by `alg` grants nothing: an HS256 token made with an RSA
/// public key as its secret fails the HMAC under the real secret, or finds no HS256 key in the set.
///
/// Verified tokens are cached, keyed by the SHA-256 of the token text, for as long as they are
/// valid: a repeated token costs a hash and a lookup instead of a signature check (RS256: ~30 µs).
/// What makes this safe:
/// - the key is the hash of the whole token, so a hit needs the very token that verified (a
///   second preimage of SHA-256 otherwise); nothing refused is cached;
/// - the expiry (`exp` + leeway) is checked on every use against the wall clock;
/// - an entry remembers the key set it was verified with (`JWKSSource.generation`): once the
///   set changes (a key removed by rotation), every token is verified again;
/// - at most `maxCachedTokens` entries (the expired and the stale are dropped first, then all).
public final class TokenVerifier: Sendable {
    public typealias Verified = (principal: Principal, refusedFrom: Int64)

    private struct Entry {
        var principal: Principal
        var refusedFrom: Int64
        var generation: UInt64
    }

    /// HS256 tokens, with the shared secret.
    public let secret: JWTVerifier?
    /// Tokens of every other algorithm, with the key set.
    public let jwks: JWKSVerifier?
    public let maxCachedTokens: Int
    /// Wall clock in seconds (the verifiers' own, so a test's manual clock governs the cache too).
    private let now: @Sendable () -> Int64
    private let cache = Mutex<[[UInt8]: Entry]>([:])

    public init(secret: JWTVerifier? = nil, jwks: JWKSVerifier? = nil, maxCachedTokens: Int = 4096) {
        self.secret = secret
        self.jwks = jwks
        self.maxCachedTokens = max(0, maxCachedTokens)
        now = jwks?.rules.now ?? secret?.rules.now ?? JWTVerifier.wallClockSeconds
    }

    /// The principal a valid token describes and the first second at which it is refused as
    /// expired, or why it is refused now.
    public func verify(_ token: String) async -> Result<Verified, JWTError> {
        guard token.utf8.count <= JWKSVerifier.maxTokenBytes else {
            return .failure(.malformed("token longer than \(JWKSVerifier.maxTokenBytes) bytes"))
        }
        let digest = APIKeyToken.sha256(Array(token.utf8))
        let generation = jwks?.source.generation ?? 0
        if let hit = cache.withLock({ $0[digest] }), hit.generation == generation {
            // Keys are re-read by age on hits too, so a rotation is noticed without a miss.
            if let source = jwks?.source, source.isDue { source.refreshInBackground(.keyAge) }
            if now() < hit.refusedFrom { return .success((hit.principal, hit.refusedFrom)) }
            cache.withLock { _ = $0.removeValue(forKey: digest) }
            return .failure(.expired)
        }
        let result = await verifyUncached(token)
        if case .success(let verified) = result {
            store(digest, Entry(principal: verified.principal, refusedFrom: verified.refusedFrom, generation: generation))
        }
        return result
    }

    private func verifyUncached(_ token: String) async -> Result<Verified, JWTError> {
        let jws: JWSCompact
        switch JWSCompact.parse(token, maxBytes: JWKSVerifier.maxTokenBytes) {
        case .success(let parsed): jws = parsed
        case .failure(let error): return .failure(error)
        }
        if jws.algorithm == .hs256, let secret { return secret.verify(jws) }
        if let jwks { return await jwks.verify(jws) }
        return .failure(.notAccepted(jws.algorithm == .hs256 ? "no JWT secret is configured (--jwt-secret-file)"
                                                             : "no key set is configured for \(jws.algorithm.rawValue) (--jwks)"))
    }

    private func store(_ digest: [UInt8], _ entry: Entry) {
        guard maxCachedTokens > 0 else { return }
        let t = now()
        cache.withLock { c in
            if c.count >= maxCachedTokens && c[digest] == nil {
                c = c.filter { t < $0.value.refusedFrom && $0.value.generation == entry.generation }
                if c.count >= maxCachedTokens { c.removeAll(keepingCapacity: true) }
            }
            c[digest] = entry
        }
    }

    /// How many verified tokens are cached now (tests and metrics).
    public var cachedTokenCount: Int { cache.withLock { $0.count } }

    /// Stops the key set's background work (a URL source's HTTP client, its start-up retries).
    public func shutdown() async { await jwks?.source.shutdown() }
}
