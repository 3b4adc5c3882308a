// The sending half of `WebSocketConnection`: messages, Ping, the close handshake (§7), the
// keep-alive and close deadlines, and output-queue accounting for backpressure.
import Sockets

extension WebSocketConnection {
    // MARK: Sending

    /// Queues a message. With permessage-deflate it is compressed whole and sent as one frame
    /// with RSV1 (RFC 7692 §6); otherwise as one frame. Fails with `.notOpen` once closing.
    public mutating func send(_ message: WebSocketMessage, now: NanoTime) throws(WebSocketSendError) -> [WebSocketAction] {
        guard state == .open else { throw .notOpen }
        switch message {
        case .text(let s):
            var s = s
            s.withUTF8 { sendData(.text, UnsafeRawBufferPointer($0), now: now) }
        case .binary(let b):
            b.withUnsafeBytes { sendData(.binary, $0, now: now) }
        }
        return takeActions(now: now)
    }

    /// Sends a Ping (§5.5.2), e.g. to measure latency; keep-alive Pings are automatic.
    public mutating func ping(_ payload: [UInt8] = [], now: NanoTime) throws(WebSocketSendError) -> [WebSocketAction] {
        guard state == .open else { throw .notOpen }
        guard payload.count <= 125 else { throw .controlPayloadTooLong }
        writeFrame(.ping, payload, now: now)
        return takeActions(now: now)
    }

    /// Starts the close handshake (§7.1.2): sends Close and waits up to `closeTimeout` for the
    /// peer's. `reason` is cut to fit the 125-byte control payload on a character boundary.
    public mutating func close(_ code: WebSocketCloseCode = .normalClosure, reason: String = "", now: NanoTime) -> [WebSocketAction] {
        guard state == .open else { return [] }
        let sendable = code.isValidOnWire ? code : .normalClosure
        writeFrame(.close, Self.closePayload(sendable, reason), now: now)
        state = .closeSent(deadline: now.adding(configuration.closeTimeout))
        return takeActions(now: now)
    }

    /// The socket accepted `byteCount` bytes of earlier `.write` actions.
    public mutating func didWrite(byteCount: Int, now: NanoTime) {
        queuedBytes = max(0, queuedBytes - byteCount)
        if byteCount > 0 { writeWaitingSince = nil }  // progress: the wait restarts (below)
        updateFlowControl(now: now)
    }

    // MARK: Timers

    /// The earliest time `tick(now:)` has something to do, or nil.
    /// (Asked after every step by the I/O adapter, so it allocates nothing.)
    public var nextDeadline: NanoTime? {
        var earliest: NanoTime?
        switch state {
        case .closeSent(let d), .awaitingTransportClose(let d): earliest = d
        case .closed: return nil
        case .open:
            if let pongDeadline {
                earliest = pongDeadline
            } else if let interval = configuration.pingInterval {
                earliest = lastReceive.adding(interval)
            }
        }
        if let stall = writeStallDeadline, earliest.map({ stall < $0 }) ?? true { earliest = stall }
        return earliest
    }

    /// When the peer counts as not reading (1008): `writeStallTimeout` after the queue rose above
    /// the high-water mark (it never fell back to the low-water mark since), or after the socket
    /// last took any byte of a non-empty queue. The second rule catches a peer that stops reading
    /// while we owe it less than the high-water mark — its window stays shut, nothing we queue
    /// moves, and without the rule only the keep-alive would notice (after ping interval + timeout).
    var writeStallDeadline: NanoTime? {
        let aboveMark = stalledSince?.adding(configuration.writeStallTimeout)
        let noProgress = writeWaitingSince?.adding(configuration.writeStallTimeout)
        guard let a = aboveMark else { return noProgress }
        guard let b = noProgress else { return a }
        return min(a, b)
    }

    /// Runs whatever deadlines have passed: keep-alive Ping, Ping timeout, close handshake
    /// timeout, the client's wait for the server to close TCP, and the write-stall limit.
    public mutating func tick(now: NanoTime) -> [WebSocketAction] {
        var actions: [WebSocketAction] = []
        if let stall = writeStallDeadline, now >= stall, state != .closed {
            state = .closed
            finish(.policyViolation, "peer not reading", &actions)
            return actions
        }
        switch state {
        case .closed:
            break
        case .closeSent(let deadline):
            if now >= deadline {
                state = .closed
                finish(.abnormalClosure, "close handshake timed out", &actions)
            }
        case .awaitingTransportClose(let deadline):
            if now >= deadline {
                state = .closed
                finish(.abnormalClosure, "close handshake timed out", &actions)
            }
        case .open:
            if let pongDeadline {
                if now >= pongDeadline {
                    state = .closed
                    finish(.abnormalClosure, "ping timeout", &actions)
                }
            } else if let interval = configuration.pingInterval, now >= lastReceive.adding(interval) {
                // Idle for a whole interval: let go of memory a quiet connection does not need.
                if !assembly.inProgress { codec?.releaseIdleState() }
                pingCounter &+= 1
                writeFrame(.ping, withUnsafeBytes(of: pingCounter.bigEndian) { Array($0) }, now: now)
                pongDeadline = now.adding(configuration.pingTimeout)
                actions += takeActions(now: now)
            }
        }
        return actions
    }

    // MARK: Internals

    mutating func sendData(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer, now: NanoTime) {
        if let codec, let compressed = codec.compress(payload) {
            compressed.withUnsafeBytes { writeFrame(opcode, $0, rsv1: true, now: now) }
        } else {
            writeFrame(opcode, payload, now: now)
        }
    }

    mutating func writeFrame(_ opcode: WebSocketOpcode, _ payload: [UInt8], now: NanoTime) {
        payload.withUnsafeBytes { writeFrame(opcode, $0, now: now) }
    }

    /// Encodes one frame into the pending output (masked with a fresh key from clients, §5.3).
    mutating func writeFrame(_ opcode: WebSocketOpcode, _ payload: UnsafeRawBufferPointer, rsv1: Bool = false, now: NanoTime) {
        let key: WebSocketMaskKey? = role == .client ? maskKeys.next() : nil
        WebSocketFrameWriter.append(fin: true, rsv1: rsv1, opcode: opcode, maskKey: key, payload: payload, to: &pendingWrite)
    }

    /// Moves pending output into a `.write` action and counts it as queued.
    mutating func flush(_ actions: inout [WebSocketAction]) {
        guard !pendingWrite.isEmpty else { return }
        queuedBytes += pendingWrite.count
        actions.append(.write(pendingWrite))
        pendingWrite = []
    }

    /// Flushes, enforces the queue limit and updates read pausing after a send.
    mutating func takeActions(now: NanoTime) -> [WebSocketAction] {
        var actions: [WebSocketAction] = []
        if queuedBytes + pendingWrite.count > configuration.maxQueuedBytes && !requestedTransportClose {
            // The peer is not reading: buffering more would grow without bound.
            pendingWrite = []
            state = .closed
            finish(.policyViolation, "peer not reading", &actions)
            return actions
        }
        flush(&actions)
        updateFlowControl(now: now)
        return actions
    }

    mutating func updateFlowControl(now: NanoTime) {
        if queuedBytes == 0 {
            writeWaitingSince = nil
        } else if writeWaitingSince == nil {
            writeWaitingSince = now
        }
        if queuedBytes >= configuration.highWaterMark {
            readingPaused = true
            if stalledSince == nil { stalledSince = now }
        } else if queuedBytes <= configuration.lowWaterMark {
            readingPaused = false
            stalledSince = nil
        }
    }

    /// Reports `.closed` (once) and `.closeTransport` (once), after any pending output.
    mutating func finish(_ code: WebSocketCloseCode, _ reason: String, _ actions: inout [WebSocketAction]) {
        flush(&actions)
        if !reportedClosed {
            reportedClosed = true
            actions.append(.closed(code: code, reason: reason))
        }
        if !requestedTransportClose {
            requestedTransportClose = true
            actions.append(.closeTransport)
        }
    }

    /// A Close payload: 2-byte code, then a UTF-8 reason cut to 123 bytes on a character boundary.
    static func closePayload(_ code: WebSocketCloseCode, _ reason: String) -> [UInt8] {
        var payload: [UInt8] = [UInt8(code.rawValue >> 8), UInt8(code.rawValue & 0xFF)]
        var used = 0
        for ch in reason.unicodeScalars {
            let n = UTF8.width(ch)
            guard used + n <= 123 else { break }
            payload.append(contentsOf: String(ch).utf8)
            used += n
        }
        return payload
    }
}
