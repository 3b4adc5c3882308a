// The server-side I/O adapter: drives a sans-I/O `WebSocketConnection` on a `TCPConnection`
// taken over from the HTTP server after the 101.
//
//   socket ─read─▶ receive ─▶ actions ─▶ .deliver → handler     .write → tcp.write
//                    ▲                   .closed  → handler     .closeTransport → flush, close
//                    └── receive([]) while buffered input and wantsToRead
//   tcp progress (totalBytesWritten) ─▶ didWrite ─▶ wantsToRead ─▶ tcp.pause/resumeReading
//   loop timer at nextDeadline ─▶ tick (keep-alive Ping, Ping timeout, close deadline, write stall)
//   EOF / socket error ─▶ transportClosed
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

    private var ws: WebSocketConnection
    private var handler: (any WebSocketHandler)?
    /// Bytes in the TCP output queue at take-over that are not ours (the 101 response).
    private var foreignBytes: UInt64
    private let writtenAtStart: UInt64
    private var reportedWritten: UInt64 = 0
    private var pumping = false
    private var transportClosing = false
    private var timer: TimerID?
    private var timerDeadline: NanoTime?

    /// How long a closing socket may take to flush its last bytes before it is cut.
    static let closeFlushTimeout: Duration = .seconds(2)

    init(connection: TCPConnection, configuration: WebSocketConfiguration,
         deflate: PerMessageDeflateAgreement?, subprotocol: String?) {
        connection.loop.assertInLoop()
        self.connection = connection
        self.subprotocol = subprotocol
        self.deflateNegotiated = deflate != nil
        ws = WebSocketConnection(role: .server, configuration: configuration, deflate: deflate, now: .now())
        foreignBytes = UInt64(connection.pendingOutputBytes)
        writtenAtStart = connection.totalBytesWritten
        // The WebSocket layer decides when to stop reading and when to drop a slow peer (1008);
        // the TCP limits mirror its marks so `connectionDidDrain` fires when it may read again,
        // and the hard drop limit sits above what the WebSocket layer can ever queue.
        var limits = WriteLimits()
        limits.highWaterMark = configuration.highWaterMark
        limits.lowWaterMark = configuration.lowWaterMark
        limits.dropLimit = configuration.maxQueuedBytes + connection.pendingOutputBytes + (1 << 20)
        connection.limits = limits
    }

    func start(handler: any WebSocketHandler, bufferedBytes: [UInt8]) {
        self.handler = handler
        connection.delegate = self
        connection.resumeReading()
        handler.webSocketDidOpen(self)
        if !bufferedBytes.isEmpty, !ws.isClosed { apply(ws.receive(bufferedBytes, now: .now())) }
        pump()
    }

    // MARK: - Application API

    /// Whether messages may still be sent (false once the close handshake has started).
    public var isOpen: Bool { ws.isOpen }
    /// Bytes handed to the socket layer and not yet written (for application-level flow control).
    public var queuedBytes: Int { ws.queuedBytes }

    /// Sends a message. Throws `.notOpen` once closing; a peer that does not read is dropped by
    /// the connection's limits (1008) rather than buffered without bound.
    public func send(_ message: WebSocketMessage) throws(WebSocketSendError) {
        loop.assertInLoop()
        apply(try ws.send(message, now: .now()))
        pump()
    }

    /// Sends a Ping (keep-alive Pings are automatic).
    public func ping(_ payload: [UInt8] = []) throws(WebSocketSendError) {
        loop.assertInLoop()
        apply(try ws.ping(payload, now: .now()))
        pump()
    }

    /// Starts the close handshake (RFC 6455 §7.1.2); `webSocketDidClose` follows.
    public func close(_ code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        loop.assertInLoop()
        apply(ws.close(code, reason: reason, now: .now()))
        pump()
    }

    // MARK: - ConnectionDelegate

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !ws.isClosed else { return }
        apply(ws.receive(bytes, now: .now()))
        pump()
    }

    public func connectionDidReadEOF(_ connection: TCPConnection) {
        if !ws.isClosed { apply(ws.transportClosed(now: .now())) }
        if !transportClosing { closeTransport() }
    }

    public func connectionDidDrain(_ connection: TCPConnection) { pump() }

    public func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        transportClosing = true
        if !ws.isClosed { apply(ws.transportClosed(now: .now())) }
        handler = nil
    }

    // MARK: - Driving

    /// Runs the actions of one step, in order.
    private func apply(_ actions: [WebSocketAction]) {
        for action in actions {
            switch action {
            case .write(let bytes):
                connection.write(bytes)
            case .deliver(let message):
                handler?.webSocket(self, didReceive: message)
            case .closed(let code, let reason):
                let h = handler
                handler = nil
                h?.webSocketDidClose(self, code: code, reason: reason)
            case .closeTransport:
                closeTransport()
            }
        }
    }

    /// Flushes, accounts written bytes, processes input held back by `receive` (one message per
    /// call, or while over the high-water mark), then sets read interest and the timer.
    /// Re-entrant calls (a handler sending from `didReceive`) return at once: the outer pump
    /// picks up their output.
    private func pump() {
        guard !pumping else { return }
        pumping = true
        defer { pumping = false }
        while !transportClosing {
            connection.flushNow()
            accountWrites()
            guard ws.wantsToRead, ws.hasBufferedInput else { break }
            let actions = ws.receive([], now: .now())
            if actions.isEmpty { break }
            apply(actions)
        }
        guard !transportClosing, !connection.isClosed else { return }
        if ws.wantsToRead { connection.resumeReading() } else { connection.pauseReading() }
        armTimer()
    }

    /// Reports socket progress to the state machine (`didWrite`): everything the TCP layer wrote
    /// past the bytes that were queued before the take-over is WebSocket output.
    private func accountWrites() {
        var written = connection.totalBytesWritten &- writtenAtStart
        let skip = min(written, foreignBytes)
        written -= skip
        guard written > reportedWritten else { return }
        let delta = written - reportedWritten
        reportedWritten = written
        ws.didWrite(byteCount: Int(clamping: delta), now: .now())
    }

    /// `.closeTransport`: write what the socket takes now, then half-close and linger (the TCP
    /// layer bounds that to 2 s); a peer that will not take our last bytes is cut after
    /// `closeFlushTimeout`.
    private func closeTransport() {
        guard !transportClosing else { return }
        transportClosing = true
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        connection.flushNow()
        connection.closeAfterFlush()
        guard !connection.isClosed else { return }
        let tcp = connection
        timer = loop.scheduleTimer(after: Self.closeFlushTimeout) { if !tcp.isClosed { tcp.close() } }
    }

    /// Keeps one loop timer at or before `nextDeadline`. The deadline moves later with every
    /// received byte, so the timer is only re-armed when it must fire earlier; a timer that fires
    /// early just ticks (a no-op) and re-arms.
    private func armTimer() {
        guard let deadline = ws.nextDeadline else { return }
        if let current = timerDeadline, current <= deadline, timer != nil { return }
        if let timer { loop.cancelTimer(timer) }
        timerDeadline = deadline
        let now = NanoTime.now()
        let delay = deadline > now ? deadline.duration(since: now) : .zero
        timer = loop.scheduleTimer(after: delay) { [weak self] in self?.timerFired() }
    }

    private func timerFired() {
        timer = nil
        timerDeadline = nil
        guard !transportClosing else { return }
        accountWrites()
        apply(ws.tick(now: .now()))
        pump()
    }
}
