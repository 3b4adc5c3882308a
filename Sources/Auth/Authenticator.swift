import Postgres
import Values
import Synchronization

/// Who is calling, once their key checked out: what they may read and write.
public struct Principal: Sendable, Hashable {
    /// nil in `--insecure-dev` mode (no key was checked).
    public var keyID: String?
    public var read: CollectionScope
    public var write: CollectionScope
    /// The verified claims of the caller's token (a JWT's payload, a webhook's answer); empty for
    /// API keys. Permission rules read them as `:claims.NAME` parameters.
    public var claims: [String: Value]

    public init(keyID: String?, read: CollectionScope, write: CollectionScope, claims: [String: Value] = [:]) {
        self.keyID = keyID
        self.read = read
        self.write = write
        self.claims = claims
    }

    /// `.forbidden` unless this principal's scopes cover `requirement`.
    public func authorize(_ requirement: AccessRequirement) -> AuthError? {
        requirement.missing(read: read, write: write).map(AuthError.forbidden)
    }
}

/// Checks `Authorization: Bearer <key>` (RFC 6750 §2.1) against `api_keys`.
///
/// Verified keys are cached in memory for `cacheTTL` (default 5 s), so a point read costs no extra
/// database round trip. Consequences, documented in docs/API.md:
/// - a revocation (or a scope change) takes effect on every instance within `cacheTTL`;
/// - an expiry takes effect exactly, because `expires_at` is checked on every request;
/// - `last_used_at` is refreshed when a key is (re)loaded, so at most once per `cacheTTL` per
///   instance: it is accurate to within that period.
/// The cache holds at most `maxCachedKeys` entries (stale ones are dropped first, then all).
/// Unknown ids are not cached: every request with one costs a primary-key lookup.
public final class Authenticator: Sendable {
    private struct Entry {
        var key: APIKey
        var sha256: [UInt8]
        var loadedAt: ContinuousClock.Instant
        /// The key text last seen to match `sha256`: presenting the same text again costs a
        /// constant-time comparison instead of a SHA-256 (a few per cent of a cached point
        /// read). Held only as long as the entry (`cacheTTL`), and only once the text was
        /// verified; the request that carries it holds it anyway.
        var verifiedText: [UInt8]? = nil
    }

    private let keys: APIKeyStore?
    private let cache = Mutex<[String: Entry]>([:])
    public let cacheTTL: Duration
    public let maxCachedKeys: Int
    /// Wall clock for expiry, monotonic clock for cache age (both injectable for tests).
    private let wallClock: @Sendable () -> PostgresTimestamp
    private let monotonic: @Sendable () -> ContinuousClock.Instant

    public init(keys: APIKeyStore, cacheTTL: Duration = .seconds(5), maxCachedKeys: Int = 4096,
                wallClock: @escaping @Sendable () -> PostgresTimestamp = APIKeyStore.now,
                monotonic: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.keys = keys
        self.cacheTTL = cacheTTL
        self.maxCachedKeys = max(1, maxCachedKeys)
        self.wallClock = wallClock
        self.monotonic = monotonic
    }

    private init() {
        keys = nil
        cacheTTL = .zero
        maxCachedKeys = 1
        wallClock = APIKeyStore.now
        monotonic = { ContinuousClock.now }
    }

    /// `bigpeer serve --insecure-dev`: every request is allowed everything, no key is checked.
    public static func insecureDevelopment() -> Authenticator { Authenticator() }

    public var isInsecureDevelopment: Bool { keys == nil }

    /// The caller presenting these `Authorization` header values (every one the request carries:
    /// more than one is malformed), or why there is none.
    public func authenticate(authorizationHeaders values: [String]) async -> Result<Principal, AuthError> {
        if values.count > 1 { return isInsecureDevelopment ? .success(Self.everything) : .failure(.malformedCredentials) }
        return await authenticate(authorization: values.first)
    }

    /// The caller presenting this `Authorization` header value (nil: no header).
    public func authenticate(authorization: String?) async -> Result<Principal, AuthError> {
        guard let keys else { return .success(Self.everything) }
        guard let authorization else { return .failure(.missingCredentials) }
        guard let token = Self.bearerToken(authorization).flatMap({ APIKeyToken(parsing: $0) }) else {
            return .failure(.malformedCredentials)
        }
        return await verify(token, keys: keys, maxAge: cacheTTL).map(\.principal)
    }

    /// An API key given as such (not in a header: a sync `hello` or `auth`), with the key's expiry.
    /// `maxAge` (at most `cacheTTL`) bounds how old a cached verification may be: a caller that
    /// re-checks every `interval` passes `cacheTTL - interval`, so a revocation still reaches it
    /// within `cacheTTL` (sync sessions: docs/PROTOCOL.md §4.1.1).
    public func authenticate(apiKey: String, maxAge: Duration? = nil) async -> Result<(principal: Principal, expiresAt: PostgresTimestamp?), AuthError> {
        guard let keys else { return .success((Self.everything, nil)) }
        guard let token = APIKeyToken(parsing: Substring(apiKey)) else { return .failure(.malformedCredentials) }
        return await verify(token, keys: keys, maxAge: min(maxAge ?? cacheTTL, cacheTTL))
    }

    private func verify(_ token: APIKeyToken, keys: APIKeyStore, maxAge: Duration) async -> Result<(principal: Principal, expiresAt: PostgresTimestamp?), AuthError> {
        let now = monotonic()
        var entry = cache.withLock { c -> Entry? in
            guard let e = c[token.id], now - e.loadedAt < maxAge else { return nil }
            return e
        }
        if entry == nil {
            let found: (APIKey, [UInt8])?
            do { found = try await keys.lookup(id: token.id) } catch { return .failure(.unavailable) }
            guard let (key, hash) = found else { return .failure(.invalidKey) }
            let fresh = Entry(key: key, sha256: hash, loadedAt: monotonic())
            entry = fresh
            store(fresh)
            if token.matches(sha256: hash) && key.refusal(at: wallClock()) == nil {
                Task { try? await keys.touch(id: key.id) }  // best effort: never fails a request
            }
        }
        guard let entry else { return .failure(.invalidKey) }
        if !(entry.verifiedText.map(token.equalsInConstantTime) ?? false) {
            guard token.matches(sha256: entry.sha256) else { return .failure(.invalidKey) }
            let verified = Array(token.text.utf8)
            cache.withLock { c in
                if c[token.id]?.loadedAt == entry.loadedAt { c[token.id]?.verifiedText = verified }
            }
        }
        if let refusal = entry.key.refusal(at: wallClock()) { return .failure(refusal) }
        return .success((Principal(keyID: entry.key.id, read: entry.key.read, write: entry.key.write), entry.key.expiresAt))
    }

    /// How many keys are cached now (for tests and metrics).
    public var cachedKeyCount: Int { cache.withLock { $0.count } }

    /// Forgets cached keys (tests; an admin endpoint could call it after a revoke).
    public func flushCache() { cache.withLock { $0.removeAll() } }

    private func store(_ e: Entry) {
        let ttl = cacheTTL, now = monotonic()
        cache.withLock { c in
            if c.count >= maxCachedKeys && c[e.key.id] == nil {
                c = c.filter { now - $0.value.loadedAt < ttl }
                if c.count >= maxCachedKeys { c.removeAll(keepingCapacity: true) }
            }
            c[e.key.id] = e
        }
    }

    static let everything = Principal(keyID: nil, read: .all, write: .all)

    /// The token of `Bearer <token>`; the scheme is case-insensitive (RFC 9110 §11.1), followed
    /// by one or more spaces (RFC 6750 §2.1). Nil for any other scheme or an empty token.
    /// Works on the UTF-8 bytes: no lowercased copy, no reversed view (seen in profiles).
    public static func bearerToken(_ header: String) -> Substring? {
        let u = header.utf8
        var i = u.startIndex
        for expected in "bearer".utf8 {
            // `| 0x20` folds ASCII case; only `B` and `b` fold to `b`, and so on for each letter.
            guard i != u.endIndex, u[i] | 0x20 == expected else { return nil }
            i = u.index(after: i)
        }
        guard i != u.endIndex, u[i] == UInt8(ascii: " ") else { return nil }
        while i != u.endIndex && u[i] == UInt8(ascii: " ") { i = u.index(after: i) }
        var end = u.endIndex
        while end > i {
            let before = u.index(before: end)
            guard u[before] == UInt8(ascii: " ") || u[before] == UInt8(ascii: "\t") else { break }
            end = before
        }
        guard end > i else { return nil }
        return Substring(u[i..<end])
    }
}
