import DQL
import HTTP
import Synchronization
import Values

/// Ditto's authentication webhook (`--auth-webhook NAME=URL`, several providers): a client logs in
/// with `{provider, token}` (sync `hello.cred`; REST `Authorization: Bearer TOKEN` with
/// `X-Auth-Provider: NAME`), and the provider's webhook decides.
///
///     POST {"version": "1", "provider": "NAME", "token": "…", "databaseID": "…" (if configured)}
///     200  {"authenticated": true, "userID": "…", "expirationSeconds": 28800,
///           "permissions": {"read": {"everything": false, "queriesByCollection": {"c": ["true"]}},
///                           "write": {…}, "remoteQuery": false},
///           "clientInfo": …, "identityServiceMetadata": …}
///          {"authenticated": false}
///
/// `authenticated: false` refuses the token (401, sync 4001). Anything but a clear answer — no
/// answer within `timeout`, a connection error, a non-2xx status, a body that is not the contract's
/// JSON — is the webhook's failure, not the client's: 503 (sync 1013), try again.
///
/// Granted tokens are cached by the SHA-256 of provider and token until `expirationSeconds` have
/// passed (checked on every use); then the webhook is asked again. Refusals (`authenticated:
/// false`) are cached the same way for `refusalSeconds`, so a refused token repeated cannot make
/// each request a webhook call; failures are not cached. Callers that miss the caches for one
/// token at the same time share one webhook call (`ask`). Permissions are parsed as a JWT's
/// `permissions` claim (`PermissionClaims`): `everything`, or the collections of
/// `queriesByCollection`, each query a read or write rule (docs/AUTH.md, "Rules"); the claims the
/// rules may name are `provider`, `userID` and `identityServiceMetadata`.
public final class AuthWebhook: Sendable {
    public struct Configuration: Sendable {
        /// Provider name → webhook URL.
        public var providers: [String: String]
        /// Sent as `databaseID` when set.
        public var databaseID: String?
        /// From the call to the whole answer, connecting included.
        public var timeout: Duration = .seconds(10)
        public var maxResponseBytes = 256 << 10
        public var maxCachedTokens = 4096
        /// How long a refusal is remembered, and how many at most (apart from the grants, so
        /// refused tokens cannot push granted ones out).
        public var refusalSeconds: Int64 = 10
        public var maxCachedRefusals = 4096
        public init(providers: [String: String]) { self.providers = providers }
    }

    /// What the webhook granted: the principal, the first second (since the epoch) it is refused
    /// from, the `clientInfo` to hand back to the client, and the `identityServiceMetadata` that
    /// presence shows for it (`[:]` when the answer had none).
    public struct Grant: Sendable, Equatable {
        public var principal: Principal
        public var refusedFrom: Int64
        public var clientInfo: Value?
        public var identityMetadata: [String: Value]
    }

    public static let maxTokenBytes = 16 * 1024
    /// Encoded (CBOR) size bounds of what a grant passes on: `clientInfo` goes into `welcome` and
    /// `auth_ok` (as large as `hello.meta` may be), `identityServiceMetadata` into presence
    /// records (their `idmeta` bound, PROTOCOL.md §8). An answer beyond them is not valid.
    public static let maxClientInfoBytes = 16 << 10
    public static let maxIdentityMetadataBytes = 4 << 10

    public let configuration: Configuration
    private let client: HTTPClient
    private let cache = Mutex<[[UInt8]: Grant]>([:])
    /// Refused tokens by digest: until when the refusal stands, and its error.
    private let refusals = Mutex<[[UInt8]: (until: Int64, error: AuthWebhookError)]>([:])
    /// Webhook calls in flight, by digest (`ask`).
    private let flights = Mutex<[[UInt8]: Task<Result<Grant, AuthWebhookError>, Never>]>([:])
    private let now: @Sendable () -> Int64

    public init(_ configuration: Configuration, now: @escaping @Sendable () -> Int64 = JWTVerifier.wallClockSeconds) throws(AuthWebhookError) {
        for (name, url) in configuration.providers {
            guard !name.isEmpty else { throw .configuration("a provider name is empty") }
            guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                throw .configuration("the webhook of provider \(name) is not an http:// or https:// URL: \(url)")
            }
        }
        self.configuration = configuration
        self.now = now
        let http = HTTPClient.Configuration(timeout: configuration.timeout, maxResponseBytes: configuration.maxResponseBytes,
                                            userAgent: "BigPeer authentication webhook")
        do {
            client = try HTTPClient(configuration: http)
        } catch {
            throw .configuration("cannot set up the HTTP client: \(error)")
        }
    }

    /// The grant for `token` of `provider`: cached while valid, else the webhook's answer.
    public func authenticate(provider: String, token: String) async -> Result<Grant, AuthWebhookError> {
        guard let url = configuration.providers[provider] else { return .failure(.unknownProvider(provider)) }
        guard !token.isEmpty, token.utf8.count <= Self.maxTokenBytes else {
            return .failure(.notAuthenticated(provider: provider, reason: "the token is empty or longer than \(Self.maxTokenBytes) bytes"))
        }
        let digest = Self.digest(provider: provider, token: token)
        if let hit = cache.withLock({ $0[digest] }) {
            if now() < hit.refusedFrom { return .success(hit) }
            cache.withLock { _ = $0.removeValue(forKey: digest) }
        }
        if let refused = refusals.withLock({ $0[digest] }), now() < refused.until { return .failure(refused.error) }
        return await ask(url, provider: provider, token: token, digest: digest)
    }

    /// The webhook's answer for a token no cache holds, asked once for all callers that miss the
    /// caches for it at the same time: a fleet of peers reconnecting with one token (or a client
    /// retrying in parallel) makes one POST, not one each. The flight caches its answer (a grant,
    /// or a refusal for `refusalSeconds`) before it ends, so a caller arriving after it finds the
    /// cache. A failure is given to the callers that waited on that flight only, and not kept:
    /// the next caller asks again.
    private func ask(_ url: String, provider: String, token: String, digest: [UInt8]) async -> Result<Grant, AuthWebhookError> {
        let (flight, first) = flights.withLock { inFlight -> (Task<Result<Grant, AuthWebhookError>, Never>, Bool) in
            if let running = inFlight[digest] { return (running, false) }
            // Unstructured: a first caller that goes away (its connection closed) does not cancel the others' answer.
            let started = Task { await self.call(url, provider: provider, token: token, digest: digest) }
            inFlight[digest] = started
            return (started, true)
        }
        let answer = await flight.value
        if first { flights.withLock { _ = $0.removeValue(forKey: digest) } }
        return answer
    }

    /// One POST to the webhook, its answer cached (`store`, `remember`).
    private func call(_ url: String, provider: String, token: String, digest: [UInt8]) async -> Result<Grant, AuthWebhookError> {
        var body: [String: Value] = ["version": "1", "provider": .string(provider), "token": .string(token)]
        if let id = configuration.databaseID { body["databaseID"] = .string(id) }
        let request = HTTPClientRequest(method: .POST, url: url, headers: ["Content-Type": "application/json", "Accept": "application/json"],
                                        body: JSON.serialize(.object(body)))
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request)
        } catch {
            return .failure(.unavailable(provider: provider, reason: "\(error)"))
        }
        guard (200..<300).contains(response.status.code) else {
            return .failure(.unavailable(provider: provider, reason: "the webhook answered with status \(response.status.code)"))
        }
        let answer = Self.grant(response.body, provider: provider, now: now())
        switch answer {
        case .success(let grant): store(digest, grant)
        case .failure(let error): if case .notAuthenticated = error { remember(digest, error) }
        }
        return answer
    }

    private func remember(_ digest: [UInt8], _ error: AuthWebhookError) {
        guard configuration.maxCachedRefusals > 0, configuration.refusalSeconds > 0 else { return }
        let t = now(), limit = configuration.maxCachedRefusals
        refusals.withLock { r in
            if r.count >= limit && r[digest] == nil {
                r = r.filter { t < $0.value.until }
                if r.count >= limit { r.removeAll(keepingCapacity: true) }
            }
            r[digest] = (t + configuration.refusalSeconds, error)
        }
    }

    private func store(_ digest: [UInt8], _ grant: Grant) {
        guard configuration.maxCachedTokens > 0 else { return }
        let t = now(), limit = configuration.maxCachedTokens
        cache.withLock { c in
            if c.count >= limit && c[digest] == nil {
                c = c.filter { t < $0.value.refusedFrom }
                if c.count >= limit { c.removeAll(keepingCapacity: true) }
            }
            c[digest] = grant
        }
    }

    /// The SHA-256 of provider and token: what grants and refusals are cached under, and what
    /// names the token for the abuse limits (never the token itself).
    public static func digest(provider: String, token: some StringProtocol) -> [UInt8] {
        APIKeyToken.sha256(Array(provider.utf8) + [0] + Array(token.utf8))
    }

    /// How many grants are cached now (tests and metrics).
    public var cachedGrantCount: Int { cache.withLock { $0.count } }
    public var cachedRefusalCount: Int { refusals.withLock { $0.count } }

    public func shutdown() async { await client.shutdown() }

    /// The grant a webhook's answer describes, or why there is none.
    static func grant(_ body: [UInt8], provider: String, now: Int64) -> Result<Grant, AuthWebhookError> {
        func bad(_ why: String) -> Result<Grant, AuthWebhookError> { .failure(.badAnswer(provider: provider, reason: why)) }
        guard let parsed = try? JSON.parse(body, limits: JSONLimits(maxDepth: 32, maxInputBytes: body.count, duplicateKeys: .reject)),
              case .object(let answer) = parsed else { return bad("the answer is not a JSON object") }
        switch answer["authenticated"] {
        case .bool(false)?: return .failure(.notAuthenticated(provider: provider, reason: "the webhook did not authenticate the token"))
        case .bool(true)?: break
        default: return bad("authenticated is not true or false")
        }
        guard case .string(let userID)? = answer["userID"], !userID.isEmpty else { return bad("userID is not a non-empty string") }
        guard case .int(let seconds)? = answer["expirationSeconds"], (0...Int64(UInt32.max)).contains(seconds) else {
            return bad("expirationSeconds is not an integer of 0...\(UInt32.max)")
        }
        let permissions = answer["permissions"] ?? .object([:])
        var claims: [String: Value] = ["provider": .string(provider), "userID": .string(userID), "permissions": permissions]
        var identityMetadata: [String: Value] = [:]
        switch answer["identityServiceMetadata"] {
        case nil, .null?: break
        case .object(let m)?:
            let size = CBORValueCodec.encode(.object(m)).count
            guard size <= maxIdentityMetadataBytes else {
                return bad("identityServiceMetadata is \(size) bytes encoded, more than \(maxIdentityMetadataBytes)")
            }
            identityMetadata = m
            claims["identityServiceMetadata"] = .object(m)
        default: return bad("identityServiceMetadata is not an object")
        }
        var clientInfo = answer["clientInfo"]
        if clientInfo == .null { clientInfo = nil }
        if let info = clientInfo, case let size = CBORValueCodec.encode(info).count, size > maxClientInfoBytes {
            return bad("clientInfo is \(size) bytes encoded, more than \(maxClientInfoBytes)")
        }
        // The same parsing as a JWT's `permissions` claim: queries are read and write rules, with
        // `:claims.userID`, `:claims.identityServiceMetadata.…` substituted.
        let granted: PermissionClaims.Granted
        switch PermissionClaims.parse(permissions, claims: claims) {
        case .success(let g): granted = g
        case .failure(let why): return bad(why.description)
        }
        let principal = Principal(keyID: "webhook:\(provider):\(userID)", read: granted.read, write: granted.write, claims: claims,
                                  readRules: granted.readRules, writeRules: granted.writeRules)
        return .success(Grant(principal: principal, refusedFrom: now + seconds, clientInfo: clientInfo, identityMetadata: identityMetadata))
    }
}

/// Why a webhook login did not produce a principal. `AuthError.webhook` carries it to HTTP (401
/// or 503) and sync (4001 or 1013).
public enum AuthWebhookError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No `--auth-webhook` of that name.
    case unknownProvider(String)
    /// The webhook answered `authenticated: false` (or the token cannot be sent).
    case notAuthenticated(provider: String, reason: String)
    /// No answer in time, a connection error, or a non-2xx status: try again.
    case unavailable(provider: String, reason: String)
    /// An answer that is not the contract's JSON (the webhook's bug; logged).
    case badAnswer(provider: String, reason: String)
    /// `--auth-webhook` itself is wrong (at start).
    case configuration(String)

    public var description: String {
        switch self {
        case .unknownProvider(let name): "no authentication provider is called \(name)"
        case .notAuthenticated(let provider, let reason): "\(provider): \(reason)"
        case .unavailable(let provider, _): "the authentication webhook of \(provider) is unavailable; retry later"
        case .badAnswer(let provider, _): "the authentication webhook of \(provider) gave no valid answer; retry later"
        case .configuration(let why): "--auth-webhook: \(why)"
        }
    }

    /// What the operator's log gets (the client sees `description` only).
    public var detail: String? {
        switch self {
        case .unavailable(_, let reason), .badAnswer(_, let reason): reason
        default: nil
        }
    }
}
