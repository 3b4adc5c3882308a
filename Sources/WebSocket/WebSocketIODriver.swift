// Runs a sans-I/O `WebSocketConnection` on a `TCPConnection`: the part of the I/O adapter that is
// the same for both roles (server: `WebSocketServerAdapter`, client: `WebSocketClientAdapter`).
//
//   socket ─read─▶ receive ─▶ actions ─▶ .deliver → onMessage     .write → tcp.write
//                    ▲                   .closed  → onClosed      .closeTransport → flush, close
//                    └── receive([]) while buffered input and wantsToRead
//   tcp progress (totalBytesWritten) ─▶ didWrite ─▶ wantsToRead ─▶ tcp.pause/resumeReading
//   loop timer at nextDeadline ─▶ tick (keep-alive Ping, Ping timeout, close deadline, write stall)
//   EOF / socket error ─▶ transportClosed
import Sockets

/// Loop-owned (see the adapters): every method runs on `connection.loop`.
final class WebSocketIODriver {
    let connection: TCPConnection
    private(set) var ws: WebSocketConnection
    /// Called for each complete message, and once when the WebSocket closes.
    var onMessage: (WebSocketMessage) -> Void = { _ in }
    var onClosed: (WebSocketCloseCode, String) -> Void = { _, _ in }

    /// Bytes in the TCP output queue at take-over that are not WebSocket frames (the 101 or the
    /// client's request).
    private let foreignBytes: UInt64
    private let writtenAtStart: UInt64
    private var reportedWritten: UInt64 = 0
    private var pumping = false
    private(set) var transportClosing = false
    private var timer: TimerID?
    private var timerDeadline: NanoTime?
    /// The application takes no messages now (a consumer out of credit): no buffered input is
    /// processed and the socket is not read, whatever the WebSocket layer wants.
    private var readingHeld = false

    /// How long a closing socket may take to flush its last bytes before it is cut.
    static let closeFlushTimeout: Duration = .seconds(2)

    init(connection: TCPConnection, ws: WebSocketConnection, foreignBytes: Int) {
        connection.loop.assertInLoop()
        self.connection = connection
        self.ws = ws
        self.foreignBytes = UInt64(foreignBytes)
        writtenAtStart = connection.totalBytesWritten
        // The WebSocket layer decides when to stop reading and when to drop a slow peer (1008);
        // the TCP marks mirror its marks so `connectionDidDrain` fires when it may read again,
        // and the hard drop limit sits above what the WebSocket layer can ever queue.
        let configuration = ws.configuration
        var limits = WriteLimits()
        limits.highWaterMark = configuration.highWaterMark
        limits.lowWaterMark = configuration.lowWaterMark
        limits.dropLimit = configuration.maxQueuedBytes + foreignBytes + (1 << 20)
        connection.limits = limits
    }

    var isOpen: Bool { ws.isOpen }
    var isClosed: Bool { ws.isClosed }
    var queuedBytes: Int { ws.queuedBytes }

    // MARK: - Inputs

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard !ws.isClosed else { return }
        apply(ws.receive(bytes, now: .now()))
        pump()
    }

    func received(_ bytes: [UInt8]) {
        guard !ws.isClosed, !bytes.isEmpty else { return pump() }
        apply(ws.receive(bytes, now: .now()))
        pump()
    }

    func send(_ message: WebSocketMessage) throws(WebSocketSendError) {
        apply(try ws.send(message, now: .now()))
        pump()
    }

    func ping(_ payload: [UInt8]) throws(WebSocketSendError) {
        apply(try ws.ping(payload, now: .now()))
        pump()
    }

    func close(_ code: WebSocketCloseCode, reason: String) {
        apply(ws.close(code, reason: reason, now: .now()))
        pump()
    }

    func readEOF() {
        if !ws.isClosed { apply(ws.transportClosed(now: .now())) }
        if !transportClosing { closeTransport() }
    }

    func drained() { pump() }

    func holdReading(_ hold: Bool) {
        guard hold != readingHeld else { return }
        readingHeld = hold
        pump()
    }

    func transportDidClose() {
        if let timer { connection.loop.cancelTimer(timer) }
        timer = nil
        transportClosing = true
        if !ws.isClosed { apply(ws.transportClosed(now: .now())) }
        ws.releaseMessageBudget()
        onMessage = { _ in }
        onClosed = { _, _ in }
    }

    // MARK: - Driving

    /// Runs the actions of one step, in order.
    private func apply(_ actions: [WebSocketAction]) {
        for action in actions {
            switch action {
            case .write(let bytes): connection.write(bytes)
            case .deliver(let message): onMessage(message)
            case .closed(let code, let reason):
                let report = onClosed
                onClosed = { _, _ in }
                report(code, reason)
            case .closeTransport: closeTransport()
            }
        }
    }

    /// Flushes, accounts written bytes, processes input held back by `receive` (one message per
    /// call, or while over the high-water mark), then sets read interest and the timer.
    /// Re-entrant calls (a handler sending from its message callback) return at once: the outer
    /// pump picks up their output.
    private func pump() {
        guard !pumping else { return }
        pumping = true
        defer { pumping = false }
        while !transportClosing {
            connection.flushNow()
            accountWrites()
            guard ws.wantsToRead, !readingHeld, ws.hasBufferedInput else { break }
            let actions = ws.receive([], now: .now())
            if actions.isEmpty { break }
            apply(actions)
        }
        guard !transportClosing, !connection.isClosed else { return }
        if ws.wantsToRead && !readingHeld { connection.resumeReading() } else { connection.pauseReading() }
        armTimer()
    }

    /// Reports socket progress to the state machine (`didWrite`): everything the TCP layer wrote
    /// past the foreign bytes queued before the WebSocket started is WebSocket output.
    private func accountWrites() {
        var written = connection.totalBytesWritten &- writtenAtStart
        written -= min(written, foreignBytes)
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
        if let timer { connection.loop.cancelTimer(timer) }
        timer = nil
        connection.flushNow()
        connection.closeAfterFlush()
        guard !connection.isClosed else { return }
        let tcp = connection
        timer = tcp.loop.scheduleTimer(after: Self.closeFlushTimeout) { if !tcp.isClosed { tcp.close() } }
    }

    /// Keeps one loop timer at or before `nextDeadline`. The deadline moves later with every
    /// received byte, so the timer is only re-armed when it must fire earlier; a timer that fires
    /// early just ticks (a no-op) and re-arms.
    private func armTimer() {
        guard let deadline = ws.nextDeadline else { return }
        if let current = timerDeadline, current <= deadline, timer != nil { return }
        if let timer { connection.loop.cancelTimer(timer) }
        timerDeadline = deadline
        let now = NanoTime.now()
        let delay = deadline > now ? deadline.duration(since: now) : .zero
        timer = connection.loop.scheduleTimer(after: delay) { [weak self] in self?.timerFired() }
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
