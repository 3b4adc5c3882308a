import Auth
import ConnectionPolicy
import HTTP
import Logging
import Postgres
import Sockets
import Store
import Sync
import SyncPeer
import SyncProtocol
import Synchronization
import WebSocket

/// `GET /api/v4/sync`: the sync protocol (docs/PROTOCOL.md) over WebSocket, subprotocol
/// `bigpeer-sync.v1` (required: a client that does not offer it gets 400, so a misdirected client
/// fails at the handshake rather than on its first message).
///
/// The upgrade itself needs no credentials — browsers cannot set headers on a WebSocket — they
/// travel in `hello` and are checked by `SyncAuthentication` before the session is `ready`.
///
/// Each socket pairs a `WebSocketServerAdapter` (owned by the connection's event loop) with a
/// `SyncConnection` (its session under a mutex, driven from the loop and from store tasks).
/// Everything the session sends hops onto the loop with `loop.execute`, which runs jobs in FIFO
/// order, so messages leave in the order the session produced them.
struct SyncRoute {
    static let path = "/api/v4/sync"

    let store: DocumentStore
    let authentication: SyncAuthentication
    let session: SyncSession.Configuration
    let limits: WebSocketConfiguration
    /// Sessions admitted at once (`--max-sync-sessions`); beyond, `refuse` 4003.
    let maxSessions: Int
    /// Sessions one identity may hold at once (`--max-sync-sessions-per-key`; nil: `maxSessions`).
    var maxSessionsPerPrincipal: Int?
    /// How often the API keys of open sessions are verified again (revocation, scope changes).
    var credentialRecheck: Duration = .seconds(1)
    /// Keeps the upstream told the sessions' subscriptions (`--upstream-relay-subscriptions`).
    var relay: SubscriptionRelay?
    /// Asked about each peer whose credentials were accepted, before it is admitted.
    var policy: SyncConnectionPolicy?
    /// Rate limits, failed-authentication throttling and the audit log of handshakes.
    var abuse: AbuseGuard?
    /// The instance's presence gossip (PROTOCOL.md §4.14); nil: presence messages are ignored.
    var presence: PresenceHub?
    /// Sessions a peer may resume on another link of any kind (PROTOCOL.md §4.16).
    let resumable = ResumableSessions()
    let logger: Logger

    /// WebSocket limits for sync: a whole protocol message fits in one WebSocket message, and the
    /// per-socket queue is bounded even for a peer that grants huge credit and stops reading
    /// (dropped with 1008 when the queue passes `maxQueuedBytes` or stalls for 30 s). The session
    /// itself stops producing at the high-water mark (`sessionQueueLimit`), so in practice the
    /// queue stays near 1 MiB and the drop is for a peer that stalls.
    /// `incomingBytes`: what all sync WebSockets together may be receiving at once (1013 past it).
    static func webSocketLimits(_ sync: SyncLimits, incomingBytes: Int = 1 << 30) -> WebSocketConfiguration {
        var c = WebSocketConfiguration(maxFrameSize: sync.maxMessageSize, maxMessageSize: sync.maxMessageSize,
                                       pingInterval: .seconds(30), highWaterMark: 1 << 20, lowWaterMark: 256 << 10,
                                       maxQueuedBytes: sync.maxMessageSize + (4 << 20), writeStallTimeout: .seconds(30))
        // The upgrade carries no credentials: until its hello, a peer is anyone who reaches the port.
        c.maxFirstMessageSize = sync.maxHelloBytes
        // Each peer may send 16 MiB messages; 10,000 sessions may not all do so at once.
        c.messageBudget = ByteBudget(limit: incomingBytes)
        return c
    }

    /// Where a session stops producing: the socket's high-water mark (where the WebSocket layer
    /// also stops reading from the peer); it goes on at the low-water mark (`webSocketDidDrain`).
    static func sessionQueueLimit(_ limits: WebSocketConfiguration) -> Int { limits.highWaterMark }

    /// WebSockets the endpoint holds at once: the admitted sessions plus room for peers still in
    /// their handshake (at most 10 s each) and for refusals to be delivered as 4003, not as a 503.
    static func maxSockets(sessions: Int) -> Int { sessions + max(64, sessions / 4) }

    /// Registers the route; returns its endpoint (shutdown closes its sockets) and the session
    /// registry (its credential monitor runs until `stopMonitor`).
    func register(on router: inout HTTPRouter) -> (WebSocketEndpoint, SyncSessionRegistry) {
        let route = self
        let registry = SyncSessionRegistry(maxSessions: maxSessions, maxSessionsPerPrincipal: maxSessionsPerPrincipal, relay: relay)
        registry.startMonitor(authentication, interval: credentialRecheck, logger: logger)
        // No permessage-deflate (`deflate: nil`, so an offer gets no extension in the 101): its
        // per-socket zlib state (~100–300 KB with context takeover) would dominate the memory of
        // an idle peer; CRDT deltas are small and already compact.
        var endpoint = WebSocketEndpoint(
            handshake: WebSocketServerHandshake(subprotocols: [SyncProtocol.webSocketSubprotocol], requireSubprotocol: true,
                                                deflate: nil),
            configuration: limits,
            makeHandler: { request, _ in
                // Once the socket is open it is a link of its own; until it closes, the link and
                // the endpoint keep the handler (strong captures, dropped at the close).
                let remote = request.remoteAddress ?? "-"
                return WebSocketMessageLink.handler(maxMessageSize: route.limits.maxMessageSize) { link in
                    _ = SyncLinkHandler(number: registry.nextNumber(), remote: remote, kind: .webSocket(maxQueuedBytes: Self.sessionQueueLimit(route.limits)),
                                        route: route, registry: registry, link: link)
                }
            })
        endpoint.maxConnections = Self.maxSockets(sessions: maxSessions)
        router.get(Self.path, endpoint.httpHandler)
        return (endpoint, registry)
    }
}

/// Messages a session produced and its loop has not written yet, and how many bytes wait for the
/// socket (the session's `transportQueued`). The first message of a burst schedules one drain on
/// the loop; the rest join it, so a fan-out step that sends `changes` and `checkpoint` costs one
/// loop job and one syscall. FIFO: appends and drains keep the order.
final class SyncOutbox: Sendable {
    private struct State {
        var messages: [[UInt8]] = []
        var drainScheduled = false
        /// Bytes in `messages`.
        var pendingBytes = 0
        /// Bytes in the socket's output queue when the loop last looked.
        var socketBytes = 0
        var peak = 0
        /// The session waits for `transportDrained`.
        var drainRequested = false
        /// The session to tell; released with the socket (it holds this outbox through its
        /// transport, so the reference is a cycle until then).
        var connection: SyncConnection?
    }
    private let state = Mutex(State())

    /// Queues `bytes`; true when the caller must schedule the drain.
    func append(_ bytes: [UInt8]) -> Bool {
        state.withLock { q in
            q.messages.append(bytes)
            q.pendingBytes += bytes.count
            q.peak = max(q.peak, q.pendingBytes + q.socketBytes)
            if q.drainScheduled { return false }
            q.drainScheduled = true
            return true
        }
    }

    func takeAll() -> [[UInt8]] {
        state.withLock { q in
            q.drainScheduled = false
            // Moved to the socket's queue: counted there until `noteSocket` says what it took.
            q.socketBytes += q.pendingBytes
            q.pendingBytes = 0
            defer { q.messages.removeAll(keepingCapacity: false) }
            return q.messages
        }
    }

    /// What the socket's output queue holds now (on the loop, after a write or a drain).
    func noteSocket(queued: Int) {
        state.withLock { q in
            q.socketBytes = queued
            q.peak = max(q.peak, q.pendingBytes + q.socketBytes)
        }
    }

    /// Bytes the session has sent that the socket has not taken yet (as last seen).
    var queuedBytes: Int { state.withLock { $0.pendingBytes + $0.socketBytes } }
    /// The most bytes that ever waited at once (tests, metrics).
    var peakQueuedBytes: Int { state.withLock { $0.peak } }

    /// Marks the session as waiting for a drain; false when it already was.
    func requestDrain() -> Bool {
        state.withLock { q in
            if q.drainRequested { return false }
            q.drainRequested = true
            return true
        }
    }

    func attach(_ connection: SyncConnection) { state.withLock { $0.connection = connection } }

    /// The session to tell, once, when it was waiting for a drain.
    func takeDrainRequest() -> SyncConnection? {
        state.withLock { q in
            defer { q.drainRequested = false }
            return q.drainRequested ? q.connection : nil
        }
    }

    /// The socket closed: nothing queued here will be written.
    func release() {
        state.withLock { q in
            q.messages = []
            q.pendingBytes = 0
            q.socketBytes = 0
            q.connection = nil
        }
    }
}

/// Checks a peer's credentials (`hello.cred`, `auth.cred`): an API key or a JWT, verified by the
/// same `Authenticator` (and its `TokenVerifier`) as REST requests. Scopes become the session's
/// permissions; the credentials' expiry becomes the session's deadline (`validForMillis`: a JWT's
/// `exp` + leeway, to the second).
struct SyncAuthentication: Sendable {
    let keys: Authenticator
    /// Wall clock in milliseconds since the epoch (expiry is wall-clock time).
    var wallClockMillis: @Sendable () -> Int64 = { APIKeyStore.now().microsecondsSince1970 / 1000 }

    /// `maxAge`: how old a cached API-key verification may be (the periodic re-check passes less
    /// than the cache period, see `SyncSessionRegistry`).
    func decide(_ credentials: SyncCredentials?, maxAge: Duration? = nil) async -> AuthDecision {
        if keys.isInsecureDevelopment { return .accept(SyncPermissions(read: .all, write: .all, principal: nil)) }
        switch credentials {
        case nil:
            return .refuse(code: .unauthorized, reason: "credentials required: an API key or a JWT in hello.cred")
        case .apiKey(let key):
            switch await keys.authenticate(apiKey: key, maxAge: maxAge) {
            case .success(let (principal, expiresAt)):
                return .accept(permissions(principal, validUntilMillis: expiresAt.map { $0.microsecondsSince1970 / 1000 }))
            case .failure(.unavailable):
                return .refuse(code: .tryAgainLater, reason: "credentials cannot be checked right now; retry later")
            case .failure(.malformedCredentials), .failure(.missingCredentials):
                return .refuse(code: .unauthorized, reason: "apiKey is not a BigPeer API key (bpk_...)")
            case .failure(let error):
                return .refuse(code: .unauthorized, reason: String("\(error)".prefix(120)))
            }
        case .jwt(let token):
            switch await keys.authenticate(jwt: token) {
            case .success(let (principal, refusedFrom)):
                let (millis, overflow) = refusedFrom.multipliedReportingOverflow(by: 1000)
                return .accept(permissions(principal, validUntilMillis: overflow ? nil : millis))
            case .failure(.invalidToken(.keysUnavailable)):
                return .refuse(code: .tryAgainLater, reason: "the JWT verification keys are unavailable; retry later")
            case .failure(let error): return .refuse(code: .unauthorized, reason: String("\(error)".prefix(120)))
            }
        case .provider(let provider, let token):
            switch await keys.authenticate(provider: provider, token: token) {
            case .success(let grant):
                let (millis, overflow) = grant.refusedFrom.multipliedReportingOverflow(by: 1000)
                var granted = permissions(grant.principal, validUntilMillis: overflow ? nil : millis)
                // Back to the peer (`welcome.info`, `auth_ok.info`), and into its presence record.
                granted.clientInfo = grant.clientInfo
                granted.identityMetadata = grant.identityMetadata
                return .accept(granted)
            case .failure(.webhook(let why)) where why.detail != nil:
                return .refuse(code: .tryAgainLater, reason: String(why.description.prefix(120)))
            case .failure(let error): return .refuse(code: .unauthorized, reason: String("\(error)".prefix(120)))
            }
        }
    }

    func permissions(_ p: Principal, validUntilMillis: Int64?) -> SyncPermissions {
        let validFor = validUntilMillis.map { UInt64(clamping: $0 - wallClockMillis()) }
        return SyncPermissions(read: Self.scope(p.read), write: Self.scope(p.write), principal: p.keyID, validForMillis: validFor,
                               readRules: p.readRules, writeRules: p.writeRules)
    }

    static func scope(_ s: CollectionScope) -> SyncPermissions.Scope {
        switch s {
        case .all: .all
        case .only(let names): .only(names)
        }
    }
}

extension SyncRoute {
    /// A session on a new link, whatever the link (WebSocket, LAN TCP): its driver, admitted by
    /// `SyncAdmission`, with credential refreshes recorded in the registry, its subscriptions
    /// relayed, its presence port, registered and started.
    func startSession(number: UInt64, configuration: SyncSession.Configuration, transport: SyncConnection.Transport, outbox: SyncOutbox,
                      executor: EventLoop, registry: SyncSessionRegistry, remote: String, link: LinkType) -> SyncConnection {
        let admission = SyncAdmission(authentication: authentication, policy: policy, registry: registry, abuse: abuse, logger: logger)
        let authentication = self.authentication, logger = self.logger
        let sessionID = configuration.sessionID
        let connection = SyncConnection(
            configuration: configuration, storage: DocumentSyncStorage(store), transport: transport, executor: executor,
            reauthenticate: { credentials, epoch in
                let decision = await authentication.decide(credentials)
                if case .accept(let granted) = decision {
                    registry.replaceCredentials(number, credentials, epoch: epoch, permissions: granted)
                }
                logger.info("sync credentials refreshed", metadata: [
                    "session": "\(sessionID)", "outcome": "\(decision)"])
                return decision
            },
            subscriptionsChanged: registry.relay?.observer(session: number),
            presence: presence?.port(session: number, type: link),
            resumable: resumable,
            uploadRejected: abuse?.uploadRefusalAuditor(remote: remote, link: link),
            ended: { registry.remove(number) }) { hello in
            await admission.admit(hello, number: number, sessionID: sessionID, remote: remote, link: link)
        }
        presence?.attach(number, connection)
        outbox.attach(connection)
        registry.register(number, connection: connection, outbox: outbox)
        connection.start()
        return connection
    }
}
