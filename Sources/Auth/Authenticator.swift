import DQL
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
    /// Which documents of the collections in `read` the caller sees (docs/AUTH.md, "Rules"),
    /// resolved against `claims` when the credential was loaded. Every read path ANDs them into
    /// what it runs (`DocumentRules.restricting`).
    public var readRules: DocumentRules
    /// Which documents of the collections in `write` the caller may change: a write is allowed
    /// only when the document matches them before and after the change (docs/AUTH.md, "Write
    /// rules"). Independent of `readRules`.
    public var writeRules: DocumentRules
    /// May download any attachment by id (docs/AUTH.md, "Attachments"). Without it, an attachment
    /// is served only through a document that references it and that this principal may read.
    public var readsAnyAttachment: Bool

    public init(keyID: String?, read: CollectionScope, write: CollectionScope, claims: [String: Value] = [:],
                readRules: DocumentRules = .none, writeRules: DocumentRules = .none, readsAnyAttachment: Bool = false) {
        self.keyID = keyID
        self.read = read
        self.write = write
        self.claims = claims
        self.readRules = readRules
        self.writeRules = writeRules
        self.readsAnyAttachment = readsAnyAttachment
    }

    /// `.forbidden` unless this principal's scopes cover `requirement`.
    public func authorize(_ requirement: AccessRequirement) -> AuthError? {
        requirement.missing(read: read, write: write, holder: credentialName).map(AuthError.forbidden)
    }

    /// The credential as a 403 names it: an API key, a JWT, or a webhook provider's token.
    public var credentialName: String {
        guard let keyID else { return "these credentials" }
        if keyID == "jwt" || keyID.hasPrefix("jwt:") { return "this JWT" }
        if keyID.hasPrefix("webhook:"), case .string(let provider)? = claims["provider"] { return "this token of provider \(provider)" }
        return "this key"
    }
}

/// Checks `Authorization: Bearer <credential>` (RFC 6750 §2.1): a BigPeer API key against
/// `api_keys`, or a JWT with `tokens` (told apart by shape: `bpk_<hex>_<hex>` has no dot, a JWT is
/// three base64url parts joined by dots; nothing is tried twice).
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
    /// Verifies JWTs (nil: a JWT is refused as not accepted here).
    public let tokens: TokenVerifier?
    /// Asks the providers' authentication webhooks about their tokens (nil: none configured).
    public let webhook: AuthWebhook?
    private let cache = Mutex<[String: Entry]>([:])
    /// Set once a key with a time limit of its own was loaded (`ServerTimeShares.anyShares`).
    private let timeLimitedKeyLoaded = Atomic<Bool>(false)
    /// Database lookups in flight, by key id (`load`).
    private let lookups = Mutex<[String: Task<Entry?, any Error>]>([:])
    public let cacheTTL: Duration
    public let maxCachedKeys: Int
    /// Wall clock for expiry, monotonic clock for cache age (both injectable for tests).
    private let wallClock: @Sendable () -> PostgresTimestamp
    private let monotonic: @Sendable () -> ContinuousClock.Instant

    public init(keys: APIKeyStore, tokens: TokenVerifier? = nil, webhook: AuthWebhook? = nil, cacheTTL: Duration = .seconds(5), maxCachedKeys: Int = 4096,
                wallClock: @escaping @Sendable () -> PostgresTimestamp = APIKeyStore.now,
                monotonic: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.keys = keys
        self.tokens = tokens
        self.webhook = webhook
        self.cacheTTL = cacheTTL
        self.maxCachedKeys = max(1, maxCachedKeys)
        self.wallClock = wallClock
        self.monotonic = monotonic
    }

    private init() {
        keys = nil
        tokens = nil
        webhook = nil
        cacheTTL = .zero
        maxCachedKeys = 1
        wallClock = APIKeyStore.now
        monotonic = { ContinuousClock.now }
    }

    /// `bigpeer serve --insecure-dev`: every request is allowed everything, no key is checked.
    public static func insecureDevelopment() -> Authenticator { Authenticator() }

    public var isInsecureDevelopment: Bool { keys == nil }

    /// The caller presenting these `Authorization` header values (every one the request carries:
    /// more than one is malformed), or why there is none. With an `X-Auth-Provider` header the
    /// bearer token is that provider's, for its webhook to judge, whatever its shape.
    public func authenticate(authorizationHeaders values: [String], providerHeaders: [String] = []) async -> Result<Principal, AuthError> {
        if values.count > 1 || providerHeaders.count > 1 { return isInsecureDevelopment ? .success(Self.everything) : .failure(.malformedCredentials) }
        guard let provider = providerHeaders.first, !isInsecureDevelopment else { return await authenticate(authorization: values.first) }
        guard let authorization = values.first else { return .failure(.missingCredentials) }
        guard let token = Self.bearerToken(authorization) else { return .failure(.malformedCredentials) }
        return await authenticate(provider: provider, token: String(token)).map(\.principal)
    }

    /// A token of an authentication provider (`X-Auth-Provider`, a sync `hello` or `auth`), as its
    /// webhook judges it.
    public func authenticate(provider: String, token: String) async -> Result<AuthWebhook.Grant, AuthError> {
        guard keys != nil else { return .success(AuthWebhook.Grant(principal: Self.everything, refusedFrom: Int64.max, clientInfo: nil, identityMetadata: [:])) }
        guard let webhook else { return .failure(.webhook(.unknownProvider(provider))) }
        return await webhook.authenticate(provider: provider, token: token).mapError(AuthError.webhook)
    }

    /// The caller presenting this `Authorization` header value (nil: no header).
    public func authenticate(authorization: String?) async -> Result<Principal, AuthError> {
        guard let keys else { return .success(Self.everything) }
        guard let authorization else { return .failure(.missingCredentials) }
        guard let bearer = Self.bearerToken(authorization) else { return .failure(.malformedCredentials) }
        if Self.hasJWTShape(bearer) { return await authenticate(jwt: String(bearer)).map(\.principal) }
        guard let token = APIKeyToken(parsing: bearer) else { return .failure(.malformedCredentials) }
        return await verify(token, keys: keys, maxAge: cacheTTL).map(\.principal)
    }

    /// A JWT (a bearer header of that shape, a sync `hello` or `auth`), with the first second (since
    /// the epoch) at which it is refused as expired: `exp` + leeway + 1.
    public func authenticate(jwt: String) async -> Result<TokenVerifier.Verified, AuthError> {
        guard keys != nil else { return .success((Self.everything, Int64.max)) }
        guard let tokens else {
            return .failure(.invalidToken(.notAccepted("no JWT verification is configured (--jwks, --jwt-secret-file)")))
        }
        return await tokens.verify(jwt).mapError(AuthError.invalidToken)
    }

    /// JWS compact serialization (RFC 7515 §7.1): three base64url parts joined by two dots, the
    /// first two non-empty (an empty signature is an unsecured JWT, refused as `alg: none` by
    /// the verifier rather than as malformed). An API key has no dot: the shapes never overlap.
    static func hasJWTShape(_ text: Substring) -> Bool {
        var dots = 0, partLength = 0
        for c in text.utf8 {
            if c == UInt8(ascii: ".") {
                guard partLength > 0, dots < 2 else { return false }
                dots += 1
                partLength = 0
            } else {
                let isBase64URL = (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z"))
                    || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
                guard isBase64URL else { return false }
                partLength += 1
            }
        }
        return dots == 2
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
            do { entry = try await load(token, keys: keys) } catch { return .failure(.unavailable) }
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
        return .success((Principal(keyID: entry.key.id, read: entry.key.read, write: entry.key.write, readRules: entry.key.readRules,
                                   writeRules: entry.key.writeRules, readsAnyAttachment: entry.key.readAttachments),
                          entry.key.expiresAt))
    }

    /// Loads the key of `token` from the database, once for all callers that miss the cache for
    /// it at the same time: a burst of handshakes with one key (every peer of a fleet reconnecting
    /// after a restart) costs one lookup and one `last_used_at` update, not one of each per peer,
    /// each holding a pooled session (with 1,000 peers the pool's waiters timed out: 1013 refusals).
    /// The first caller caches the result; nil when no key has that id.
    private func load(_ token: APIKeyToken, keys: APIKeyStore) async throws -> Entry? {
        let (lookup, first) = lookups.withLock { inFlight -> (Task<Entry?, any Error>, Bool) in
            if let running = inFlight[token.id] { return (running, false) }
            let started = Task { () throws -> Entry? in
                guard let (key, hash) = try await keys.lookup(id: token.id) else { return nil }
                return Entry(key: key, sha256: hash, loadedAt: self.monotonic())
            }
            inFlight[token.id] = started
            return (started, true)
        }
        let result = await lookup.result
        guard first else { return try result.get() }
        // Cached before the lookup stops being in flight: a caller arriving in between finds one or the other.
        if case .success(let fresh?) = result {
            store(fresh)
            if fresh.key.timeLimit != nil { timeLimitedKeyLoaded.store(true, ordering: .relaxed) }
        }
        lookups.withLock { $0[token.id] = nil }
        if case .success(let fresh?) = result {
            if token.matches(sha256: fresh.sha256) && fresh.key.refusal(at: wallClock()) == nil {
                Task { try? await keys.touch(id: fresh.key.id) }  // best effort: never fails a request
            }
        }
        return try result.get()
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

    static let everything = Principal(keyID: nil, read: .all, write: .all, readsAnyAttachment: true)

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

/// A key's own share of the server's time comes from the cache of verified keys: the guard asks
/// after a request was answered (not 401), when its key was verified moments ago. A key pushed out
/// of the cache meanwhile (more than `maxCachedKeys` others since) is charged at the server's
/// share, if any, until it is loaded again.
extension Authenticator: ServerTimeShares {
    public var anyShares: Bool { timeLimitedKeyLoaded.load(ordering: .relaxed) }

    public func serverTimeShare(credential: String) -> TokenBucketRate? {
        cache.withLock { $0[credential]?.key.timeLimit }
    }
}
