// The server-side I/O adapter: a `ConnectionDelegate` that takes over a `TCPConnection` from the
// HTTP server after the 101 and runs a `WebSocketConnection` on it (`WebSocketIODriver`), with
// an application `WebSocketHandler` on top.
import HTTP
import Sockets

/// One server-side WebSocket on its connection's event loop.
///
/// **Threading.** Created, driven and used only on `loop` (the loop that owns the socket): the
/// HTTP server calls the upgrade hook there, and `TCPConnection` calls its delegate there. The
/// `WebSocketConnection` value is owned by this object alone. Code on another thread reaches a
/// socket with `LoopBound(adapter, loop: adapter.loop)` inside `loop.execute`.
///
/// **Ownership.** The `TCPConnection` holds this adapter (its delegate) until the socket closes;
/// the adapter holds the handler until it has reported the close, then lets it go, so a handler
/// that keeps a strong reference to its adapter does not leak.
public final class WebSocketServerAdapter: ConnectionDelegate {
    public let connection: TCPConnection
    public var loop: EventLoop { connection.loop }
    /// The subprotocol agreed in the handshake, if any.
    public let subprotocol: String?
    /// Whether permessage-deflate was negotiated.
    public let deflateNegotiated: Bool

    private let driver: WebSocketIODriver
    private var handler: (any WebSocketHandler)?
    /// Runs once when the socket closes (the endpoint's registry and connection count).
    var onClose: (() -> Void)?

    init(connection: TCPConnection, configuration: WebSocketConfiguration,
         deflate: PerMessageDeflateAgreement?, subprotocol: String?) {
        self.connection = connection
        self.subprotocol = subprotocol
        self.deflateNegotiated = deflate != nil
        driver = WebSocketIODriver(
            connection: connection,
            ws: WebSocketConnection(role: .server, configuration: configuration, deflate: deflate, now: .now()),
            foreignBytes: connection.pendingOutputBytes)
    }

    func start(handler: any WebSocketHandler, bufferedBytes: [UInt8]) {
        self.handler = handler
        driver.onMessage = { [weak self] message in
            guard let self else { return }
            self.handler?.webSocket(self, didReceive: message)
        }
        driver.onClosed = { [weak self] code, reason in
            guard let self else { return }
            let h = self.handler
            self.handler = nil
            h?.webSocketDidClose(self, code: code, reason: reason)
        }
        guard !connection.isClosed else {  // the 101 could not be written: nothing to run
            handler.webSocketDidClose(self, code: .abnormalClosure, reason: "connection lost during the upgrade")
            return connectionDidClose(connection, error: nil)
        }
        connection.delegate = self
        connection.resumeReading()
        handler.webSocketDidOpen(self)
        driver.received(bufferedBytes)
    }

    // MARK: - Application API

    /// Whether messages may still be sent (false once the close handshake has started).
    public var isOpen: Bool { driver.isOpen }
    /// Bytes handed to the socket layer and not yet written (for application-level flow control).
    public var queuedBytes: Int { driver.queuedBytes }
    /// Bytes in the TCP output queue right now (exact after a flush, unlike `queuedBytes`, which
    /// is updated on the next step).
    public var socketQueuedBytes: Int { connection.pendingOutputBytes }

    /// Asks for `webSocketDidDrain` once the output queue falls to the low-water mark. False when
    /// it already is there (no call follows).
    public func requestDrainNotification() -> Bool {
        loop.assertInLoop()
        return connection.requestDrainNotification()
    }

    /// Holds reading (true) or lets it go on (false): while held no message is delivered and the
    /// socket is not read, so a consumer that takes nothing pushes back over TCP.
    public func holdReading(_ hold: Bool) {
        loop.assertInLoop()
        driver.holdReading(hold)
    }

    /// Sends a message. Throws `.notOpen` once closing; a peer that does not read is dropped by
    /// the connection's limits (1008) rather than buffered without bound.
    public func send(_ message: WebSocketMessage) throws(WebSocketSendError) {
        loop.assertInLoop()
        try driver.send(message)
    }

    /// Sends several messages with one flush to the socket (fan-out: a session's `changes` and
    /// `checkpoint` leave in one syscall). Stops at the first that cannot be sent.
    public func send(contentsOf messages: [WebSocketMessage]) throws(WebSocketSendError) {
        loop.assertInLoop()
        try connection.batchingWrites { () throws(WebSocketSendError) in
            for m in messages { try driver.send(m) }
        }
    }

    /// Sends a Ping (keep-alive Pings are automatic).
    public func ping(_ payload: [UInt8] = []) throws(WebSocketSendError) {
        loop.assertInLoop()
        try driver.ping(payload)
    }

    /// Starts the close handshake (RFC 6455 §7.1.2); `webSocketDidClose` follows.
    public func close(_ code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        loop.assertInLoop()
        driver.close(code, reason: reason)
    }

    /// Closes the TCP connection now, without a close handshake (`webSocketDidClose` follows):
    /// for a peer that did not finish the handshake in time when the server stops.
    public func abort() {
        loop.assertInLoop()
        connection.close()
    }

    // MARK: - ConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) { driver.received(bytes) }
    public func connectionDidReadEOF(_ connection: TCPConnection) { driver.readEOF() }
    public func connectionDidDrain(_ connection: TCPConnection) {
        driver.drained()
        handler?.webSocketDidDrain(self)
    }
    public func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        driver.transportDidClose()
        handler = nil
        let done = onClose
        onClose = nil
        done?()
    }
}
