// A WebSocket route on the HTTP server: the handshake (RFC 6455 §4.2) answered from an
// `HTTPRequest`, then the connection handed to a `WebSocketServerAdapter` and an application
// `WebSocketHandler`.
//
//   HTTP GET + Upgrade ──▶ WebSocketEndpoint.upgrade ──▶ .upgrade(101, takeOver)
//                                   │ refused: 400 / 403 / 405 / 426 (+ Sec-WebSocket-Version: 13)
//   takeOver (connection's loop) ──▶ WebSocketServerAdapter (ConnectionDelegate) ◀──▶ WebSocketHandler
import HTTP
import Sockets
import Synchronization

/// The application side of one WebSocket.
///
/// **Threading.** Every call arrives on the event loop that owns the connection, and every
/// method of the `WebSocketServerAdapter` passed in must be called there too (from another
/// thread or task: `loop.execute` with a `LoopBound`). Handlers must not block the loop.
public protocol WebSocketHandler: AnyObject {
    /// The 101 is queued and the adapter is in charge; sending is allowed from here on.
    func webSocketDidOpen(_ socket: WebSocketServerAdapter)
    /// A complete message (text is valid UTF-8; sizes are within the endpoint's limits).
    func webSocket(_ socket: WebSocketServerAdapter, didReceive message: WebSocketMessage)
    /// Called exactly once, when the WebSocket is closed (handshake done, failed, timed out, or
    /// the transport ended). The adapter drops its reference to the handler afterwards.
    func webSocketDidClose(_ socket: WebSocketServerAdapter, code: WebSocketCloseCode, reason: String)
    /// The socket's output queue fell to the low-water mark after having been above the high mark
    /// (or after `requestDrainNotification`): a producer that paused may go on.
    func webSocketDidDrain(_ socket: WebSocketServerAdapter)
}

extension WebSocketHandler {
    public func webSocketDidOpen(_ socket: WebSocketServerAdapter) {}
    public func webSocketDidClose(_ socket: WebSocketServerAdapter, code: WebSocketCloseCode, reason: String) {}
    public func webSocketDidDrain(_ socket: WebSocketServerAdapter) {}
}

/// One WebSocket endpoint: its handshake policy (subprotocols, origin, permessage-deflate),
/// its limits, and a factory for the per-connection handler. Register `httpHandler` for `GET`.
public struct WebSocketEndpoint: Sendable {
    public var handshake: WebSocketServerHandshake
    public var configuration: WebSocketConfiguration
    /// Most WebSockets this endpoint holds at once; beyond it upgrades get 503 with `Retry-After`.
    /// Upgraded connections leave the HTTP server's `maxConnections` accounting, so this is what
    /// bounds them (each idle one costs ~2 KB plus kernel socket buffers).
    public var maxConnections: Int
    /// WebSockets open right now on this endpoint (shared by every copy of the endpoint).
    public var openConnections: Int { registry.count.load(ordering: .relaxed) }
    private let registry = ConnectionRegistry()
    /// Makes the handler of an accepted connection, on its loop. `subprotocol` is the one agreed
    /// (nil when the client offered none the endpoint supports and none is required).
    public var makeHandler: @Sendable (_ request: HTTPRequest, _ subprotocol: String?) -> any WebSocketHandler

    public init(
        handshake: WebSocketServerHandshake, configuration: WebSocketConfiguration = WebSocketConfiguration(),
        maxConnections: Int = 100_000,
        makeHandler: @escaping @Sendable (_ request: HTTPRequest, _ subprotocol: String?) -> any WebSocketHandler
    ) {
        self.handshake = handshake
        self.configuration = configuration
        self.maxConnections = max(0, maxConnections)
        self.makeHandler = makeHandler
    }

    /// The route handler: runs inline on the connection's loop (the handshake never blocks).
    public var httpHandler: HTTPHandler {
        let endpoint = self
        return .sync { endpoint.upgrade($0) }
    }

    /// Validates the upgrade request. A refusal is an ordinary response with the status the
    /// handshake chose (426 carries `Sec-WebSocket-Version: 13`, RFC 6455 §4.4).
    public func upgrade(_ request: HTTPRequest) -> HTTPHandlerResult {
        let version: (major: Int, minor: Int) = request.head.version == .http1_1 ? (1, 1) : (1, 0)
        let upgradeRequest = WebSocketUpgradeRequest(
            method: request.method.rawValue, httpVersion: version, headers: request.headers.fields)
        switch handshake.accept(upgradeRequest) {
        case .failure(let rejected):
            // The server's JSON error object (`HTTPResponse.error`), plus the handshake's headers.
            var response = HTTPResponse.error(HTTPStatus(rejected.status, Self.reason(rejected.status)),
                                              message: "\(rejected.error)", requestID: request.requestID)
            for (name, value) in rejected.responseHeaders { response.headers.add(name, value) }
            return .response(response)
        case .success(let accepted):
            // Reserve a slot now (the take-over follows synchronously on this loop); released
            // when the socket closes.
            guard registry.count.add(1, ordering: .relaxed).newValue <= maxConnections else {
                registry.count.subtract(1, ordering: .relaxed)
                var response = HTTPResponse.error(.serviceUnavailable, message: "too many WebSocket connections",
                                                  requestID: request.requestID)
                response.headers.set("Retry-After", "5")
                return .response(response)
            }
            let endpoint = self
            let registry = self.registry
            let response = HTTPResponse(status: .switchingProtocols, headers: HTTPHeaders(accepted.responseHeaders))
            return .upgrade(response, HTTPUpgrade { tcp, buffered in
                let adapter = WebSocketServerAdapter(
                    connection: tcp, configuration: endpoint.configuration, deflate: accepted.deflate,
                    subprotocol: accepted.subprotocol)
                let id = registry.insert(adapter)
                adapter.onClose = { registry.remove(id) }
                adapter.start(handler: endpoint.makeHandler(request, accepted.subprotocol), bufferedBytes: buffered)
            })
        }
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 405: "Method Not Allowed"
        case 426: "Upgrade Required"
        default: "Error"
        }
    }
}

extension WebSocketEndpoint {
    /// Starts the close handshake with `code` on every open WebSocket of this endpoint (on each
    /// one's loop) and waits until they are all closed or `deadline` passes; then closes the TCP
    /// connections still open. For graceful shutdown: peers get 1001 "going away" instead of a
    /// reset, and reconnect elsewhere.
    public func closeAll(_ code: WebSocketCloseCode = .goingAway, reason: String = "server shutting down",
                         deadline: Duration = .seconds(5)) async {
        startClosingAll(code, reason: reason)
        let end = NanoTime.now().adding(deadline)
        while openConnections > 0, NanoTime.now() < end {
            try? await Task.sleep(for: .milliseconds(20))
        }
        // Whoever has not finished the handshake by now is cut off: a server that stops must not
        // leave sockets open behind it (its loops stop next, and an open socket nobody serves
        // would keep a peer waiting for its own silence timeout before it reconnects).
        guard openConnections > 0 else { return }
        for bound in registry.snapshot() {
            bound.loop.execute { bound.value.abort() }
        }
        let cutOff = NanoTime.now().adding(.seconds(1))
        while openConnections > 0, NanoTime.now() < cutOff {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

extension WebSocketEndpoint {
    /// The non-waiting half of `closeAll`: asks every open WebSocket's loop to start the close
    /// handshake, and returns at once.
    public func startClosingAll(_ code: WebSocketCloseCode = .goingAway, reason: String = "server shutting down") {
        for bound in registry.snapshot() {
            bound.loop.execute { bound.value.close(code, reason: reason) }
        }
    }
}

/// The open WebSockets of one endpoint, shared by the endpoint's copies: a count for the cap
/// (reserved before the take-over) and the adapters themselves for `closeAll`.
final class ConnectionRegistry: Sendable {
    let count = Atomic<Int>(0)
    private let nextID = Atomic<UInt64>(0)
    /// Each adapter behind a `LoopBound`: opened only on its own loop.
    private let open = Mutex<[UInt64: LoopBound<WebSocketServerAdapter>]>([:])

    func insert(_ adapter: WebSocketServerAdapter) -> UInt64 {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let bound = LoopBound(adapter, loop: adapter.loop)
        open.withLock { $0[id] = bound }
        return id
    }

    /// Forgets a closed adapter and frees its slot.
    func remove(_ id: UInt64) {
        _ = open.withLock { $0.removeValue(forKey: id) }
        count.subtract(1, ordering: .relaxed)
    }

    func snapshot() -> [LoopBound<WebSocketServerAdapter>] { open.withLock { Array($0.values) } }
}
