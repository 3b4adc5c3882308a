// The sans-I/O WebSocket connection: bytes in, actions out (RFC 6455 §5–§7).
//
//            receive(bytes) ─┐                       ┌─► .deliver(message)
//     send/ping/close(…) ────┼─► WebSocketConnection ├─► .write(bytes)       (frames to send)
//     didWrite(n), tick() ───┤   (this file: input;  ├─► .closed(code, reason)
//     transportClosed() ─────┘    +Output: sending,  └─► .closeTransport
//                                 timers, close)
//
// Time is an argument of every step (`now`), never read from a clock here: the I/O layer passes
// `NanoTime.now()` and arms a timer for `nextDeadline`; tests pass a manual clock's value. The
// connection owns its zlib state (a class), so copies share it: keep exactly one copy, on the
// thread (event loop) that owns the socket.
import Sockets

public struct WebSocketConnection {
    public let role: WebSocketRole
    public let configuration: WebSocketConfiguration

    enum State: Equatable {
        case open
        /// We sent Close and wait for the peer's (§5.5.1), until `deadline`.
        case closeSent(deadline: NanoTime)
        /// Client after the close handshake: the server closes TCP first (§7.1.1), until `deadline`.
        case awaitingTransportClose(deadline: NanoTime)
        case closed
    }

    /// The message being reassembled from fragments (§5.4).
    struct Assembly {
        var opcode: WebSocketOpcode = .binary
        var inProgress = false
        var compressed = false
        var fragments = 0
        var bytes: [UInt8] = []
        var utf8 = UTF8Validator()
    }

    var state: State = .open
    /// Whether a whole data message has arrived (`maxFirstMessageSize` applies until then).
    var firstMessageReceived = false
    /// What the message being received holds of `configuration.messageBudget`.
    var budgetHeld = 0
    var parser: WebSocketFrameParser
    var codec: PerMessageDeflateCodec?
    var maskKeys: WebSocketMaskKeySource
    var assembly = Assembly()
    /// The frame whose payload is streaming in: its opcode, FIN, and (control frames) payload.
    var frameOpcode: WebSocketOpcode = .binary
    var frameFin = false
    var controlPayload: [UInt8] = []
    /// Set when a step delivered a message: `receive` returns so the application can answer it.
    var delivered = false

    // Output and flow control.
    var pendingWrite: [UInt8] = []
    public internal(set) var queuedBytes = 0
    var readingPaused = false
    /// When the queue rose above the high-water mark (nil once it falls to the low-water mark).
    var stalledSince: NanoTime?
    /// When the socket last took any of our output while some was queued, or when output became
    /// queued: a peer whose TCP window stays shut this long is not reading, however little we
    /// owe it (nil while nothing is queued).
    var writeWaitingSince: NanoTime?
    var reportedClosed = false
    var requestedTransportClose = false

    // Keep-alive.
    var lastReceive: NanoTime
    var pongDeadline: NanoTime?
    var pingCounter: UInt64 = 0

    /// - Parameters:
    ///   - deflate: the agreement from the handshake, or nil when permessage-deflate is off.
    ///   - maskKeys: client only; keep `.secureRandom` outside tests (§5.3, §10.3).
    public init(
        role: WebSocketRole, configuration: WebSocketConfiguration = WebSocketConfiguration(),
        deflate: PerMessageDeflateAgreement? = nil, maskKeys: WebSocketMaskKeySource = .secureRandom, now: NanoTime
    ) {
        self.role = role
        self.configuration = configuration
        parser = WebSocketFrameParser(peer: role == .server ? .client : .server,
                                      maxFrameSize: configuration.maxFrameSize, allowRSV1: deflate != nil)
        codec = deflate.map { PerMessageDeflateCodec(agreement: $0, role: role) }
        self.maskKeys = maskKeys
        lastReceive = now
    }

    /// True while the application may send data (before the close handshake starts).
    public var isOpen: Bool { state == .open }
    /// True once the WebSocket is closed (the `.closed` action has been emitted).
    public var isClosed: Bool { reportedClosed }

    /// False while the peer should not be read from: our output queue is above the high-water
    /// mark (until it drains below the low-water mark), or the connection is closed. A peer that
    /// sends Pings but never reads our Pongs therefore stops being read, and after
    /// `writeStallTimeout` is dropped: it can never make us buffer without bound.
    public var wantsToRead: Bool { !readingPaused && state != .closed }

    // MARK: Input

    /// Feeds bytes read from the socket and processes them up to and including the first
    /// complete message. Stopping there lets the application answer that message before later
    /// frames are acted on (a protocol error right behind a message must not swallow its echo).
    /// While `hasBufferedInput`, call again with no bytes after applying the actions:
    ///
    ///     var actions = ws.receive(bytes, now: now)
    ///     while true {
    ///         apply(actions)
    ///         guard ws.hasBufferedInput else { break }
    ///         actions = ws.receive([], now: now)
    ///         if actions.isEmpty { break } // the rest is an incomplete frame
    ///     }
    public mutating func receive(_ bytes: UnsafeRawBufferPointer, now: NanoTime) -> [WebSocketAction] {
        var actions: [WebSocketAction] = []
        guard state != .closed else { return actions }
        if bytes.count > 0 {
            lastReceive = now
            pongDeadline = nil // any byte proves the peer is alive
            parser.append(bytes)
            // An adapter that keeps reading while `wantsToRead` is false would make the parser
            // buffer without bound; refuse instead.
            if readingPaused && parser.bufferedByteCount > configuration.highWaterMark {
                state = .closed
                finish(.policyViolation, "peer not reading", &actions)
                return actions
            }
        }
        delivered = false
        // Stop at a delivered message, and when our own output (Pongs, Close) reaches the
        // high-water mark: the rest stays buffered until the peer reads what we owe it.
        while state != .closed && !delivered && queuedBytes + pendingWrite.count < configuration.highWaterMark {
            do {
                guard let event = try parser.next() else { break }
                try handle(event, now: now, &actions)
            } catch {
                fail(error, &actions)
            }
        }
        actions += takeActions(now: now)
        return actions
    }

    /// Received bytes not yet processed: a message was delivered before them, output reached the
    /// high-water mark (call again once `wantsToRead` is true), or they are an incomplete frame.
    public var hasBufferedInput: Bool { state != .closed && parser.bufferedByteCount > 0 }

    public mutating func receive(_ bytes: [UInt8], now: NanoTime) -> [WebSocketAction] {
        bytes.withUnsafeBytes { receive($0, now: now) }
    }

    /// The transport reached end of file or failed.
    public mutating func transportClosed(now: NanoTime) -> [WebSocketAction] {
        var actions: [WebSocketAction] = []
        state = .closed
        finish(.abnormalClosure, "transport closed", &actions)
        return actions
    }

    private mutating func handle(_ event: WebSocketFrameEvent, now: NanoTime, _ actions: inout [WebSocketAction]) throws(WebSocketProtocolError) {
        switch event {
        case .header(let h):
            frameOpcode = h.opcode
            frameFin = h.fin
            if h.opcode.isControl {
                controlPayload.removeAll(keepingCapacity: true)
                return
            }
            try startFrame(h)
        case .payload(let chunk):
            if frameOpcode.isControl {
                controlPayload.append(contentsOf: chunk) // ≤ 125 bytes: the parser checked
            } else {
                try appendData(chunk, isFinal: false)
            }
        case .end:
            if frameOpcode.isControl {
                try handleControl(now: now, &actions)
            } else if frameFin {
                try finishMessage(&actions)
            }
        }
    }

    /// Fragment rules (§5.4) and limits that the header alone decides (§10.4).
    private mutating func startFrame(_ h: WebSocketFrameHeader) throws(WebSocketProtocolError) {
        if h.opcode == .continuation {
            guard assembly.inProgress else { throw .unexpectedContinuation }
            assembly.fragments += 1
            guard assembly.fragments <= configuration.maxFragmentsPerMessage else {
                throw .tooManyFragments(limit: configuration.maxFragmentsPerMessage)
            }
        } else {
            guard !assembly.inProgress else { throw .expectedContinuation }
            assembly.inProgress = true
            assembly.opcode = h.opcode
            assembly.compressed = h.rsv1 // the parser allows RSV1 only with a deflate agreement
            assembly.fragments = 1
            assembly.utf8 = UTF8Validator()
        }
        if !assembly.compressed && UInt64(assembly.bytes.count) + h.payloadLength > UInt64(messageLimit) {
            throw .messageTooLarge(limit: messageLimit)
        }
    }

    /// Gives back what the message being received holds of the endpoint's budget: when it is
    /// delivered, and when the connection ends (`WebSocketIODriver.transportDidClose`).
    public mutating func releaseMessageBudget() {
        guard budgetHeld > 0 else { return }
        configuration.messageBudget?.give(budgetHeld)
        budgetHeld = 0
    }

    /// The largest message accepted now: the first one may be held to `maxFirstMessageSize`.
    private var messageLimit: Int {
        guard !firstMessageReceived, let first = configuration.maxFirstMessageSize else { return configuration.maxMessageSize }
        return min(first, configuration.maxMessageSize)
    }

    private mutating func appendData(_ chunk: [UInt8], isFinal: Bool) throws(WebSocketProtocolError) {
        // Charged as it arrives (a frame header's length costs nothing until it is sent); wire
        // bytes: what a compressed message inflates to is bounded by `maxMessageSize` per connection.
        if let budget = configuration.messageBudget, !chunk.isEmpty {
            guard budget.take(chunk.count) else { throw .overloaded }
            budgetHeld += chunk.count
        }
        if assembly.compressed, let codec {
            let limit = messageLimit
            let isText = assembly.opcode == .text
            // `withUnsafeBytes` rethrows untyped errors, so the typed one is carried out by hand.
            var failure: WebSocketProtocolError?
            chunk.withUnsafeBytes { input in
                do throws(WebSocketProtocolError) {
                    try codec.decompress(input, isFinal: isFinal) { (out) throws(WebSocketProtocolError) in
                        guard assembly.bytes.count + out.count <= limit else { throw .messageTooLarge(limit: limit) }
                        if isText { guard assembly.utf8.feed(out) else { throw .invalidUTF8 } }
                        assembly.bytes.append(contentsOf: out)
                    }
                } catch {
                    failure = error
                }
            }
            if let failure { throw failure }
        } else {
            if assembly.opcode == .text { guard assembly.utf8.feed(chunk) else { throw .invalidUTF8 } }
            if assembly.bytes.isEmpty {
                assembly.bytes = chunk // take the parser's buffer instead of copying it
            } else {
                assembly.bytes.append(contentsOf: chunk)
            }
        }
    }

    private mutating func finishMessage(_ actions: inout [WebSocketAction]) throws(WebSocketProtocolError) {
        if assembly.compressed { try appendData([], isFinal: true) }
        if assembly.opcode == .text && !assembly.utf8.isAtBoundary { throw .invalidUTF8 }
        let bytes = assembly.bytes
        let opcode = assembly.opcode
        assembly = Assembly()
        firstMessageReceived = true
        releaseMessageBudget()
        // §1.4: after sending Close an endpoint may discard what still arrives.
        guard state == .open else { return }
        flush(&actions)
        delivered = true
        actions.append(.deliver(opcode == .text ? .text(String(decoding: bytes, as: UTF8.self)) : .binary(bytes)))
    }

    private mutating func handleControl(now: NanoTime, _ actions: inout [WebSocketAction]) throws(WebSocketProtocolError) {
        switch frameOpcode {
        case .ping:
            // §5.5.2/§5.5.3: answer with a Pong carrying the same payload, as soon as practical.
            if state == .open { writeFrame(.pong, controlPayload, now: now) }
        case .pong:
            break // liveness is already noted by receive(); unsolicited Pongs are allowed (§5.5.3)
        case .close:
            try handleClose(now: now, &actions)
        default:
            break
        }
    }

    /// §5.5.1 and §7.1.5: validate the peer's Close, answer it, finish the handshake.
    private mutating func handleClose(now: NanoTime, _ actions: inout [WebSocketAction]) throws(WebSocketProtocolError) {
        var code = WebSocketCloseCode.noStatusReceived
        var reason = ""
        if controlPayload.count == 1 { throw .closePayloadTooShort }
        if controlPayload.count >= 2 {
            code = WebSocketCloseCode(UInt16(controlPayload[0]) << 8 | UInt16(controlPayload[1]))
            guard code.isValidOnWire else { throw .invalidCloseCode(code.rawValue) }
            let text = controlPayload[2...]
            guard text.withUnsafeBytes({ UTF8Validator.isValid($0) }) else { throw .invalidUTF8 }
            reason = String(decoding: text, as: UTF8.self)
        }
        if state == .open {
            // Echo the code (§5.5.1: "typically echos the status code it received").
            writeFrame(.close, code == .noStatusReceived ? [] : Array(controlPayload[0..<2]), now: now)
        }
        if role == .server {
            state = .closed // §7.1.1: the server closes the TCP connection first
            finish(code, reason, &actions)
        } else {
            state = .awaitingTransportClose(deadline: now.adding(configuration.closeTimeout))
            flush(&actions)
            if !reportedClosed { reportedClosed = true; actions.append(.closed(code: code, reason: reason)) }
        }
    }

    /// §7.1.7 "Fail the WebSocket Connection": send Close with the code, then close the transport
    /// without waiting for the peer's answer.
    private mutating func fail(_ error: WebSocketProtocolError, _ actions: inout [WebSocketAction]) {
        codec?.abandonReceive()
        assembly = Assembly() // release a partial message now, not when the connection is freed
        if state == .open {
            writeFrame(.close, Self.closePayload(error.closeCode, error.description), now: lastReceive)
        }
        state = .closed
        finish(error.closeCode, error.description, &actions)
    }
}
