import Auth
import DQL
import HTTP
import Logging
import Store
import Synchronization
import Sync
import SyncProtocol
import Values

/// The abuse limits (`AbuseLimiter`) and the audit log (`AuthAudit`) where requests meet
/// authentication: around every authenticated REST route (`guarding`), and in a sync handshake's
/// admission (`refusal(handshakeFrom:)`, `settle`, `audit`). docs/AUTH.md, "Abuse limits".
///
/// REST, before the route runs: the client's address must have failed authentications left and a
/// token in its bucket; the credential the request claims must not be over its limit. After it
/// answered: a 401 to a request that carried credentials counts as a failed authentication of the
/// address; any other answer charges the (now verified) credential one request. Going by the
/// answer keeps the routes as they are, whatever way in (API key, JWT) produced it.
final class AbuseGuard: Sendable {
    let limiter: AbuseLimiter
    let audit: AuthAudit
    let logger: Logger
    /// Requests waiting for their credential's server time, by credential (`waitForServerTime`).
    /// A leaf lock, held for one dictionary update.
    private let waiting = Mutex<[ExactString: Int]>([:])
    /// Requests and sync handshakes refused by each limit, and requests that waited for their
    /// credential's server time and then ran (`statistics`, the metrics). Leaf locks.
    private let refused = Mutex<[RateLimited.Limit: Int]>([:])
    private let waited = Atomic<Int>(0)

    init(limiter: AbuseLimiter, audit: AuthAudit, logger: Logger) {
        self.limiter = limiter
        self.audit = audit
        self.logger = logger
    }

    /// The server's guard; nil when every limit is off, nothing is audited, and no key can have
    /// a share of the server's time of its own (`shares`: the authenticator of a server that
    /// checks API keys).
    static func make(_ configuration: ServerConfiguration, shares: (any ServerTimeShares)?, logger: Logger) -> AbuseGuard? {
        if configuration.abuseLimits.isEmpty && configuration.auditLog == .off && shares == nil { return nil }
        let audit = AuthAudit(logger: configuration.auditLogger ?? Logger(label: AuthAudit.label), mode: configuration.auditLog)
        return AbuseGuard(limiter: AbuseLimiter(configuration.abuseLimits, shares: shares), audit: audit, logger: logger)
    }

    /// The routes it wraps: every authenticated REST route. Not the health checks and the OpenAPI
    /// document (no credentials), the echo endpoint, nor the sync upgrade (its handshake is checked
    /// at `hello`, which comes by every kind of link).
    static func guards(_ path: String) -> Bool {
        path.hasPrefix("/api/v4/") && path != SyncRoute.path && path != "/api/v4/openapi.yaml" && path != EchoRoute.path
    }

    func guarding(_ handler: HTTPHandler, route: String) -> HTTPHandler {
        // Writes are POSTs: only their denials may need what the route notes (`RefusalNote`).
        let notes = audit.logsDenials && route.hasPrefix("POST ")
        switch handler {
        case .sync(let h):
            return .sync { request in
                let checked = self.before(request, route: route)
                if let refused = checked.refused { return .response(refused) }
                let started = self.serverTimeStart()
                let result = h(request)
                self.after(request, result, route: route, claimed: checked.claimed, note: nil, serverTime: started.map { .now - $0 })
                return result
            }
        case .async(let h):
            return .async { request in
                var checked = self.before(request, route: route, mayWait: true)
                if let claimed = checked.claimed, let wait = checked.wait {
                    checked.refused = await self.waitForServerTime(wait, credential: claimed).map { self.refuse(request, $0, route: route) }
                }
                if let refused = checked.refused { return .response(refused) }
                let started = self.serverTimeStart()
                let (result, note) = try await Self.noting(notes) { try await h(request) }
                self.after(request, result, route: route, claimed: checked.claimed, note: note, serverTime: started.map { .now - $0 })
                return result
            }
        case .streaming(let maxBodyBytes, let h):
            return .streaming(maxBodyBytes: maxBodyBytes) { request, body in
                let checked = self.before(request, route: route)
                if let refused = checked.refused { return .response(refused) }
                let (result, note) = try await Self.noting(notes) { try await h(request, body) }
                self.after(request, result, route: route, claimed: checked.claimed, note: note)
                return result
            }
        }
    }

    /// When a route started, if its server time may be charged (`--time-limit-credential`, or a
    /// server where keys may have a `--time-limit` of their own). Streaming
    /// routes (uploads) are not: their time is mostly the client's pace of sending. A streamed
    /// answer is charged up to its head; what follows is the client's pace of reading.
    private func serverTimeStart() -> ContinuousClock.Instant? {
        limiter.timesRequests ? .now : nil
    }

    /// `body`'s result, run with a `RefusalNote` of its own when `notes` (else none: no
    /// allocation, no task-local).
    private static func noting(_ notes: Bool, _ body: () async throws -> HTTPHandlerResult) async throws -> (HTTPHandlerResult, RefusalNote?) {
        guard notes else { return (try await body(), nil) }
        let note = RefusalNote()
        return (try await RefusalNote.$current.withValue(note) { try await body() }, note)
    }

    /// The refusal, if any, and the identity the request claims when the credential limit needed
    /// it (`after` uses it rather than reading the header again). `mayWait` (an asynchronous
    /// route): a server-time refusal comes back as `wait` instead, for `waitForServerTime`; it is
    /// answered, and audited, only if the wait does not end it.
    private func before(_ request: HTTPRequest, route: String, mayWait: Bool = false) -> (refused: HTTPResponse?, claimed: String?, wait: RateLimited?) {
        let address = request.remoteAddress.flatMap(ClientAddressKey.init(remote:))
        if let refusal = limiter.admit(address: address) { return (refuse(request, refusal, route: route), nil, nil) }
        guard limiter.limitsCredentials, let claimed = ClaimedIdentity.of(request) else { return (nil, nil, nil) }
        if let refusal = limiter.check(credential: claimed) {
            if mayWait && refusal.limit == .credentialServerTime { return (nil, claimed, refusal) }
            return (refuse(request, refusal, route: route), claimed, nil)
        }
        return (nil, claimed, nil)
    }

    /// A request over its credential's server time waits for the share to come back, up to
    /// `AbuseLimits.serverTimeWait`, and then runs; refused (nil otherwise) only when the wait
    /// would be longer. Answering 429 at once would not slow a client that sends again as soon as
    /// it is refused: each refusal would cost a request's reading and parsing (and a 4 MiB body's
    /// copying), thousands a second; waiting paces it at the rate of its share. A waiting request
    /// costs its connection and its body, both bounded already. Concurrent waiters of one
    /// credential may all run when the share is back: the next checks see the debt they leave.
    private func waitForServerTime(_ refusal: RateLimited, credential: String) async -> RateLimited? {
        // A waiting request holds its body: at most `serverTimeMaxWaiting` of one credential wait,
        // the next ones are refused at once (so one key cannot park 10,000 bodies for 5 s each).
        let key = ExactString(credential)
        let admitted = waiting.withLock { w -> Bool in
            guard w[key, default: 0] < limiter.limits.serverTimeMaxWaiting else { return false }
            w[key, default: 0] += 1
            return true
        }
        guard admitted else { return refusal }
        defer {
            waiting.withLock { w in
                let left = w[key, default: 1] - 1
                w[key] = left > 0 ? left : nil
            }
        }
        let deadline = ContinuousClock.now + limiter.limits.serverTimeWait
        var refusal = refusal
        while refusal.limit == .credentialServerTime {
            // At least a millisecond: a bucket a hair short of a second must not make a spin.
            let wake = ContinuousClock.now + max(refusal.retryAfter, .milliseconds(1))
            guard wake <= deadline else { return refusal }
            do { try await Task.sleep(until: wake) } catch { return refusal }  // the connection went away
            guard let again = limiter.check(credential: credential) else {
                waited.add(1, ordering: .relaxed)
                return nil
            }
            refusal = again
        }
        return refusal
    }

    private func refuse(_ request: HTTPRequest, _ refusal: RateLimited, route: String) -> HTTPResponse {
        count(refusal)
        if AuthAudit.logsRefusal(inARow: refusal.refusedInARow) {
            audit.denied(who: ClaimedIdentity.of(request), verified: false,
                         address: request.remoteAddress ?? "-", what: route, why: "429 \(refusal.limit.rawValue)",
                         ["refused_in_a_row": "\(refusal.refusedInARow)"])
        }
        let error = APIError(refusal)
        return route.hasSuffix(" /api/v4/store/execute") ? error.executeResponse(to: request, logger: logger) : error.response(to: request, logger: logger)
    }

    private func after(_ request: HTTPRequest, _ result: HTTPHandlerResult, route: String, claimed: String?, note: RefusalNote?,
                       serverTime: Duration? = nil) {
        guard case .response(let response) = result else { return }
        let code = response.status.code
        if code != 401 && code != 403 && !limiter.limitsCredentials && !audit.logsAllowed { return }  // the common case: nothing to do
        switch code {
        case 401:
            let authorization = request.headers["Authorization"]
            if authorization != nil { limiter.recordFailedAuthentication(address: request.remoteAddress.flatMap(ClientAddressKey.init(remote:))) }
            audit.denied(who: ClaimedIdentity.of(request), verified: false, address: request.remoteAddress ?? "-",
                         what: route, why: Self.why(response))
        case 403:
            let who = claimed ?? ClaimedIdentity.of(request)
            if let who { limiter.charge(credential: who, serverTime: serverTime) }
            // A write-rule refusal's line also names the documents and the rules (`RefusalNote`).
            let named = note?.writeRuleRefusal.map(AuthAudit.metadata) ?? [:]
            audit.denied(who: who, verified: true, address: request.remoteAddress ?? "-", what: route, why: Self.why(response), named)
        case 503:
            break  // perhaps the key table could not be read: the identity is not known to be true
        default:
            // With a credential limit on, `before` has read the header already. (A key's own time
            // limit can turn the limits on between `before` and here: read it then.)
            let who = claimed ?? ClaimedIdentity.of(request)
            if let who { limiter.charge(credential: who, serverTime: serverTime) }
            audit.allowed(who: who, address: request.remoteAddress ?? "-", what: route, ["status": "\(response.status.code)"])
        }
    }

    private func count(_ refusal: RateLimited) {
        refused.withLock { $0[refusal.limit, default: 0] += 1 }
    }

    /// What the metrics show (`ServiceMetrics`): refusals by limit since start, requests waiting
    /// for their credential's server time now, and those that waited and then ran.
    var statistics: (refused: [RateLimited.Limit: Int], waiting: Int, waited: Int) {
        (refused.withLock { $0 }, waiting.withLock { $0.values.reduce(0, +) }, waited.load(ordering: .relaxed))
    }

    /// The status and the description the client got (error bodies are small JSON objects; a
    /// CBOR one is named by its status alone).
    static func why(_ response: HTTPResponse) -> String {
        guard case .bytes(let body) = response.body, body.count <= 4096,
              case .object(let top)? = try? JSON.parse(body), case .object(let error)? = top["error"],
              case .string(let description)? = error["description"] else { return "\(response.status.code)" }
        return "\(response.status.code) \(description)"
    }
}

extension AbuseGuard {
    /// The refusal of a sync handshake from `remote` when its address is over a limit (before its
    /// credentials are checked); nil when it may go on.
    func refusal(handshakeFrom remote: String) -> AuthDecision? {
        limiter.admit(address: ClientAddressKey(remote: remote)).map(refusedHandshake)
    }

    /// What becomes of a handshake's credential decision: a refused credential counts as a failed
    /// authentication of the address; an accepted one takes a token of the credential's bucket
    /// (refused 4003 when it has none).
    func settle(_ decision: AuthDecision, hello: Hello, remote: String) -> AuthDecision {
        switch decision {
        case .accept(let permissions):
            // A webhook login's bucket is its token's (as on REST); the others' their verified identity.
            let credential = if case .provider? = hello.credentials { ClaimedIdentity.of(hello.credentials) } else { permissions.principal }
            if let credential, let refusal = limiter.take(credential: credential) { return refusedHandshake(refusal) }
        case .refuse(let code, _):
            if code == .unauthorized && hello.credentials != nil {
                limiter.recordFailedAuthentication(address: ClientAddressKey(remote: remote))
            }
        }
        return decision
    }

    /// The audit line of a handshake's final decision (credentials, limits, policy, room).
    /// `verified`: the identity whose credentials were accepted, if they were.
    func audit(_ decision: AuthDecision, hello: Hello, verified: String?, remote: String, link: LinkType) {
        switch decision {
        case .accept(let permissions):
            audit.allowed(who: permissions.principal, address: remote, what: "sync handshake",
                          ["link": "\(link.rawValue)", "read": "\(Self.describe(permissions.read))", "write": "\(Self.describe(permissions.write))"])
        case .refuse(let code, let reason):
            audit.denied(who: verified ?? ClaimedIdentity.of(hello.credentials), verified: verified != nil, address: remote,
                         what: "sync handshake", why: "\(code.rawValue) \(reason)", ["link": "\(link.rawValue)"])
        }
    }

    /// The audit lines of an upload's entries its write rules refused (`ack.rejected` with
    /// `DocumentStore.writeRuleRejection`): one line per collection, naming how many entries and
    /// the first few documents (`AuthAudit.metadata(_:)`). At most `maxUploadAuditLines` per upload
    /// (an upload is bounded by the peer's credit, so a peer that uploads 10,000 refused documents
    /// costs a line or a few per upload, not per document); the last line counts the collections
    /// it leaves out. Other rejections (malformed deltas, gaps) are the peer's bugs, not auth
    /// decisions, and are not audited.
    func auditUploadRefusals(_ permissions: SyncPermissions, entries: [UploadEntry], rejected: [UploadRejection], remote: String, link: LinkType) {
        guard audit.logsDenials else { return }
        var refusals: [WriteRuleRefusal] = []
        var position: [String: Int] = [:]
        for r in rejected where r.index >= 0 && r.index < entries.count {
            let document = entries[r.index].document
            guard r.message == DocumentStore.writeRuleRejection(document.collection) else { continue }
            if let i = position[document.collection] {
                refusals[i].refused += 1
                if refusals[i].documentIDs.count < WriteRuleRefusal.maxNamedDocuments { refusals[i].documentIDs.append(document.id) }
            } else {
                position[document.collection] = refusals.count
                refusals.append(WriteRuleRefusal(collection: document.collection, operation: "upload", documentIDs: [document.id], refused: 1,
                                                 rules: permissions.writeRules.texts(for: document.collection)))
            }
        }
        for (i, refusal) in refusals.prefix(Self.maxUploadAuditLines).enumerated() {
            var fields = AuthAudit.metadata(refusal)
            fields["link"] = "\(link.rawValue)"
            if i == Self.maxUploadAuditLines - 1 && refusals.count > Self.maxUploadAuditLines {
                fields["other_collections"] = "\(refusals.count - i - 1)"
            }
            audit.denied(who: permissions.principal, verified: true, address: remote, what: "sync upload",
                         why: "not permitted by the write rules", fields)
        }
    }

    static let maxUploadAuditLines = 4

    /// `auditUploadRefusals` for the session of a peer at `remote` (`SyncConnection(uploadRejected:)`).
    func uploadRefusalAuditor(remote: String, link: LinkType) -> @Sendable (SyncPermissions, [UploadEntry], [UploadRejection]) -> Void {
        { permissions, entries, rejected in self.auditUploadRefusals(permissions, entries: entries, rejected: rejected, remote: remote, link: link) }
    }

    static func describe(_ scope: SyncPermissions.Scope) -> String {
        switch scope {
        case .all: "all"
        case .only(let names): names.isEmpty ? "none" : names.sorted().joined(separator: ",")
        }
    }

    /// Refused by policy (4003), with the retry hint peers wait on (PROTOCOL.md §4.2).
    private func refusedHandshake(_ refusal: RateLimited) -> AuthDecision {
        count(refusal)
        let reason: String = switch refusal.limit {
        case .address: "too many handshakes from this address"
        case .credential: "too many handshakes with these credentials"
        case .credentialServerTime: "these credentials used their share of the server's time"  // REST only: not reached
        case .failedAuthentication: "too many failed authentications from this address"
        }
        return .refuse(code: .policy, reason: RetryHint.reason(reason, retryAfterSeconds: UInt32(clamping: refusal.retryAfterSeconds)))
    }
}
