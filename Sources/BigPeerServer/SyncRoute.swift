import Auth
import HTTP
import Logging
import Sockets
import Store
import Sync
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
    let feed: ChangeFeed
    let authentication: SyncAuthentication
    let session: SyncSession.Configuration
    let limits: WebSocketConfiguration
    let logger: Logger

    /// WebSocket limits for sync: a whole protocol message fits in one WebSocket message, and the
    /// per-socket queue is bounded even for a peer that grants huge credit and stops reading
    /// (dropped with 1008 when the queue passes `maxQueuedBytes` or stalls for 30 s).
    static func webSocketLimits(_ sync: SyncLimits) -> WebSocketConfiguration {
        WebSocketConfiguration(maxFrameSize: sync.maxMessageSize, maxMessageSize: sync.maxMessageSize,
                               pingInterval: .seconds(30), highWaterMark: 1 << 20, lowWaterMark: 256 << 10,
                               maxQueuedBytes: sync.maxMessageSize + (4 << 20), writeStallTimeout: .seconds(30))
    }

    func register(on router: inout HTTPRouter) -> WebSocketEndpoint {
        let route = self
        let sessions = Atomic<UInt64>(0)
        // No permessage-deflate: its per-socket zlib state (~100–300 KB with context takeover)
        // would dominate the memory of an idle peer; CRDT deltas are small and already compact.
        let endpoint = WebSocketEndpoint(
            handshake: WebSocketServerHandshake(subprotocols: [SyncProtocol.webSocketSubprotocol], requireSubprotocol: true),
            configuration: limits,
            makeHandler: { request, _ in
                let number = sessions.add(1, ordering: .relaxed).newValue
                var config = route.session
                config.sessionID = "\(route.session.sessionID)-\(number)"
                return SyncSocketHandler(route: route, configuration: config, remote: request.remoteAddress ?? "-")
            })
        router.get(Self.path, endpoint.httpHandler)
        return endpoint
    }
}

/// One sync WebSocket: the bridge between the adapter (loop-owned) and the session driver.
///
/// **Threading.** Created and called on the connection's event loop only (`WebSocketHandler`).
/// The transport closures given to `SyncConnection` may run on any thread; they reach the adapter
/// through a `LoopBound` inside `loop.execute`.
final class SyncSocketHandler: WebSocketHandler {
    let route: SyncRoute
    let configuration: SyncSession.Configuration
    let remote: String
    var connection: SyncConnection?

    init(route: SyncRoute, configuration: SyncSession.Configuration, remote: String) {
        self.route = route
        self.configuration = configuration
        self.remote = remote
    }

    func webSocketDidOpen(_ socket: WebSocketServerAdapter) {
        let bound = LoopBound(socket, loop: socket.loop)
        let outbox = SyncOutbox()
        let transport = SyncConnection.Transport(
            send: { bytes in
                guard outbox.append(bytes) else { return }  // a drain is already scheduled
                bound.loop.execute {
                    try? bound.value.send(contentsOf: outbox.takeAll().map { .binary($0) })
                }
            },
            close: { code, reason in bound.loop.execute { bound.value.close(WebSocketCloseCode(code), reason: reason) } })
        let authentication = route.authentication
        let logger = route.logger
        let sessionID = configuration.sessionID, remote = self.remote
        let connection = SyncConnection(configuration: configuration, store: route.store, feed: route.feed, transport: transport,
                                        executor: socket.loop) { hello in
            let decision = await authentication.decide(hello)
            switch decision {
            case .accept(let permissions):
                logger.info("sync session accepted", metadata: [
                    "session": "\(sessionID)", "remote": "\(remote)", "site": "\(hello.site)",
                    "device": "\(hello.deviceName)", "principal": "\(permissions.principal ?? "insecure-dev")"])
            case .refuse(let code, let reason):
                logger.notice("sync session refused", metadata: [
                    "session": "\(sessionID)", "remote": "\(remote)", "code": "\(code.rawValue)", "reason": "\(reason)"])
            }
            return decision
        }
        self.connection = connection
        connection.start()
    }

    func webSocket(_ socket: WebSocketServerAdapter, didReceive message: WebSocketMessage) {
        switch message {
        case .binary(let bytes):
            connection?.receive(bytes)
        case .text:
            // PROTOCOL.md §2: every message is a binary CBOR map; text is a protocol violation.
            socket.close(WebSocketCloseCode(SyncCloseCode.protocolViolation.rawValue), reason: "sync messages are binary (CBOR), not text")
            connection?.transportClosed()
            connection = nil
        }
    }

    func webSocketDidClose(_ socket: WebSocketServerAdapter, code: WebSocketCloseCode, reason: String) {
        connection?.transportClosed()
        connection = nil
    }
}

/// Messages a session produced and its loop has not written yet. The first message of a burst
/// schedules one drain on the loop; the rest join it, so a fan-out step that sends `changes` and
/// `checkpoint` costs one loop job and one syscall. FIFO: appends and drains keep the order.
final class SyncOutbox: Sendable {
    private let queue = Mutex<(messages: [[UInt8]], drainScheduled: Bool)>(([], false))

    /// Queues `bytes`; true when the caller must schedule the drain.
    func append(_ bytes: [UInt8]) -> Bool {
        queue.withLock { q in
            q.messages.append(bytes)
            if q.drainScheduled { return false }
            q.drainScheduled = true
            return true
        }
    }

    func takeAll() -> [[UInt8]] {
        queue.withLock { q in
            q.drainScheduled = false
            defer { q.messages.removeAll(keepingCapacity: false) }
            return q.messages
        }
    }
}

/// Checks a peer's `hello` credentials: an API key (the same keys and scopes as the REST API) or
/// an HS256 JWT signed with the configured secret. Scopes become the session's permissions.
struct SyncAuthentication: Sendable {
    let keys: Authenticator
    let jwt: JWTVerifier?

    func decide(_ hello: Hello) async -> AuthDecision {
        if keys.isInsecureDevelopment { return .accept(SyncPermissions(read: .all, write: .all, principal: nil)) }
        switch hello.credentials {
        case nil:
            return .refuse(code: .unauthorized, reason: "credentials required: an API key or a JWT in hello.cred")
        case .apiKey(let key):
            switch await keys.authenticate(authorization: "Bearer " + key) {
            case .success(let principal):
                return .accept(Self.permissions(principal))
            case .failure(.unavailable):
                return .refuse(code: .tryAgainLater, reason: "credentials cannot be checked right now; retry later")
            case .failure(.malformedCredentials), .failure(.missingCredentials):
                return .refuse(code: .unauthorized, reason: "apiKey is not a BigPeer API key (bpk_...)")
            case .failure(let error):
                return .refuse(code: .unauthorized, reason: String("\(error)".prefix(120)))
            }
        case .jwt(let token):
            guard let jwt else {
                return .refuse(code: .unauthorized, reason: "this server does not accept JWTs (no JWT secret configured)")
            }
            switch jwt.verify(token) {
            case .success(let principal): return .accept(Self.permissions(principal))
            case .failure(let error): return .refuse(code: .unauthorized, reason: String("\(error)".prefix(120)))
            }
        }
    }

    static func permissions(_ p: Principal) -> SyncPermissions {
        SyncPermissions(read: scope(p.read), write: scope(p.write), principal: p.keyID)
    }

    static func scope(_ s: CollectionScope) -> SyncPermissions.Scope {
        switch s {
        case .all: .all
        case .only(let names): .only(names)
        }
    }
}
