import CEpoll
import Glibc

/// Receives a connection's events, always on the connection's loop.
///
/// The connection holds its delegate strongly until it closes (then lets go), so a protocol layer
/// can own the connection and be owned by it without a leak. A layer that takes over a connection
/// (the WebSocket upgrade) just assigns itself as the new delegate.
public protocol ConnectionDelegate: AnyObject {
    /// The connection is established (client connect done) and, with TLS, the handshake finished.
    /// Accepted plain connections are ready at once and do not get this call.
    func connectionIsReady(_ connection: TCPConnection)
    /// Bytes arrived. The buffer is valid only during the call (it is the loop's read buffer).
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer)
    /// The peer finished sending (read returned 0). Default: close once output is flushed.
    func connectionDidReadEOF(_ connection: TCPConnection)
    /// The output queue fell to `lowWaterMark` or below after having been above `highWaterMark`.
    func connectionDidDrain(_ connection: TCPConnection)
    /// Closed, for good. `error` is nil for an orderly close.
    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?)
}

extension ConnectionDelegate {
    public func connectionIsReady(_ connection: TCPConnection) {}
    public func connectionDidReadEOF(_ connection: TCPConnection) { connection.closeAfterFlush() }
    public func connectionDidDrain(_ connection: TCPConnection) {}
}

/// Output limits of one connection (backpressure).
public struct WriteLimits: Sendable {
    /// Above this many queued bytes the connection reports `isBackpressured`; producers should stop.
    public var highWaterMark = 256 * 1024
    /// `connectionDidDrain` fires when the queue falls to this after exceeding the high mark.
    public var lowWaterMark = 64 * 1024
    /// A producer that keeps queueing while the queue is above `highWaterMark` (it ignores
    /// backpressure) and takes it past this is dropped (`ENOBUFS`), freeing the queue. One write
    /// to a queue at or below the high-water mark is always taken whole, however large: its size
    /// says nothing about the peer (a 31 MB response used to be cut off after its head here).
    public var dropLimit = 16 * 1024 * 1024
    public init() {}
}

/// A non-blocking TCP connection (optionally TLS) owned by one loop: reads into the loop's buffer,
/// queues writes, flushes with one `write`/`writev`, and watches `EPOLLOUT` only while output is
/// pending (level-triggered epoll).
///
/// Not `Sendable`: every method must be called on `loop` (checked by assertions in debug builds).
/// Other threads reach it with `loop.execute` through a `LoopBound`.
public final class TCPConnection {
    public let loop: EventLoop
    public let fd: Int32
    public let remoteAddress: SocketAddress?
    public var delegate: (any ConnectionDelegate)?
    public var limits: WriteLimits

    private var registration: Registration?
    private var interest: Interest = []
    private var output = OutputQueue()
    private var tls: TLSSession?
    private var readingEnabled = true
    private var inReadCallback = false
    private var wasAboveHighWater = false
    private var connecting = false
    private var handshakeTimer: TimerID?
    private var state: State = .open

    private enum State { case open, closingAfterFlush, lingering, closed }

    public var isClosed: Bool { state == .closed }
    public var pendingOutputBytes: Int { output.count }
    /// The most bytes ever queued at once on this connection: what a slow reader cost it.
    public private(set) var peakPendingOutputBytes = 0
    /// Bytes handed to the kernel (or to TLS) so far: write-progress for timeouts.
    public private(set) var totalBytesWritten: UInt64 = 0
    public var isBackpressured: Bool { output.count > limits.highWaterMark }
    /// Called after a flush handed bytes to the kernel (or to TLS), once `totalBytesWritten` has
    /// moved: for a layer that completes sends when their bytes have left (`MessageLink`). Nil by
    /// default, so a connection that does not ask pays one nil check per flush.
    public var onBytesWritten: (() -> Void)?
    /// The ALPN protocol agreed during the TLS handshake, if any.
    public var negotiatedProtocol: String? { tls?.negotiatedProtocol }
    public var isTLS: Bool { tls != nil }

    /// Adopts an accepted descriptor. With `tls`, the server handshake runs first and must finish
    /// within `handshakeTimeout`.
    public init(
        acceptedFD fd: Int32, remoteAddress: SocketAddress?, loop: EventLoop, limits: WriteLimits = WriteLimits(),
        tls: TLSContext? = nil, handshakeTimeout: Duration = .seconds(10)
    ) throws {
        loop.assertInLoop()
        self.loop = loop
        self.fd = fd
        self.remoteAddress = remoteAddress
        self.limits = limits
        if let tls { self.tls = try TLSSession(context: tls, fd: fd, serverName: nil) }
        if self.tls != nil { armHandshakeTimer(handshakeTimeout) }
    }

    /// Starts a non-blocking connect; `delegate.connectionIsReady` follows (after the TLS
    /// handshake, with host-name verification against `serverName`), or `connectionDidClose`.
    public static func connect(
        to address: SocketAddress, loop: EventLoop, tls: TLSContext? = nil, serverName: String? = nil,
        timeout: Duration = .seconds(10), delegate: any ConnectionDelegate
    ) throws -> TCPConnection {
        loop.assertInLoop()
        let fd = try SocketOps.streamSocket(family: address.family)
        SocketOps.setNoDelay(fd)
        let c: TCPConnection
        do {
            c = try TCPConnection(acceptedFD: fd, remoteAddress: address, loop: loop, tls: nil)
            if let tls { c.tls = try TLSSession(context: tls, fd: fd, serverName: serverName) }
        } catch {
            Syscall.close(fd)
            throw error
        }
        c.delegate = delegate
        let rc = address.withSockaddr { Glibc.connect(fd, $0, $1) }
        if rc == 0 {
            try c.start()
            if c.tls == nil { c.becameReady() } else { c.armHandshakeTimer(timeout); c.driveHandshake() }
        } else if bp_errno() == EINPROGRESS {
            c.connecting = true
            c.armHandshakeTimer(timeout)
            try c.start()
        } else {
            let e = IOError(call: "connect(\(address))", errno: bp_errno())
            Syscall.close(fd)
            throw e
        }
        return c
    }

    /// Registers with the loop. Call once, after setting `delegate`.
    public func start() throws(IOError) {
        loop.assertInLoop()
        precondition(registration == nil, "start() called twice")
        interest = desiredInterest()
        registration = try loop.register(fd: fd, interest: interest) { [self] ready in self.handle(ready) }
    }

    // MARK: - Reading

    /// Stops reading (backpressure toward the peer: its sends stall in the kernel buffers).
    public func pauseReading() {
        guard readingEnabled else { return }
        readingEnabled = false
        updateInterest()
    }

    public func resumeReading() {
        guard !readingEnabled else { return }
        readingEnabled = true
        updateInterest()
        // TLS may already hold decrypted bytes that epoll cannot see.
        if let tls, tls.hasBufferedPlaintext { let bound = LoopBound(self, loop: loop)
            loop.execute { bound.value.readAvailable() } }
    }

    private func handle(_ ready: Readiness) {
        if connecting {
            connecting = false
            let err = SocketOps.pendingError(fd)
            if err != 0 { return fail(IOError(call: "connect", errno: err)) }
            if tls == nil { becameReady() } else { driveHandshake() }
            return
        }
        if let tls, !tls.handshakeDone { return driveHandshake() }
        if ready.isWritable && !output.isEmpty { flushNow() }
        if state == .closed { return }
        // A hang-up or error is reported whatever the interest (level-triggered): read even while
        // paused, so the error or EOF ends the connection instead of the loop spinning on it.
        if ready.isReadable { readAvailable(evenIfPaused: ready.isHangup) }
    }

    private func readAvailable(evenIfPaused: Bool = false) {
        guard state != .closed, readingEnabled || state == .lingering || evenIfPaused else { return }
        let buf = loop.readBuffer
        var budget = 16  // reads per wake-up: fairness between connections
        while budget > 0 && state != .closed && (readingEnabled || state == .lingering || evenIfPaused) {
            budget -= 1
            let n: Int
            if let tls {
                let (got, step) = tls.read(into: buf)
                switch step {
                case .done: n = got
                case .wantRead: return
                case .wantWrite: updateInterest(forceWritable: true); return
                case .closed: n = 0
                case .failed(let e): return fail(e)
                }
            } else {
                let r: IOResult<Int>
                do {
                    r = try Syscall.nonBlocking("read") { Glibc.read(fd, buf.baseAddress, buf.count) }
                } catch {
                    return fail(error)
                }
                guard case .processed(let got) = r else { return }
                n = got
            }
            if n == 0 { return readEOF() }
            if state == .lingering { continue }  // discarding after our half-close
            inReadCallback = true
            delegate?.connection(self, didRead: UnsafeRawBufferPointer(rebasing: buf[0..<n]))
            inReadCallback = false
            if state != .closed { flushNow() }
            // A short plain read drained the socket; TLS must read until WANT_READ (it buffers).
            if tls == nil && n < buf.count { return }
        }
        if state != .closed, let tls, tls.hasBufferedPlaintext {
            let bound = LoopBound(self, loop: loop)
            loop.execute { bound.value.readAvailable() }
        }
    }

    private func readEOF() {
        if state == .lingering { return finishClose(error: nil) }
        readingEnabled = false
        updateInterest()
        if let delegate { delegate.connectionDidReadEOF(self) } else { closeAfterFlush() }
    }

    // MARK: - Writing

    /// Queues `bytes`. Flushed at the end of the current read callback, or now outside one.
    public func write(_ bytes: [UInt8]) {
        guard state == .open else { return }
        let before = output.count
        output.append(bytes)
        afterQueue(queuedBefore: before)
    }

    public func write(copying bytes: UnsafeRawBufferPointer) {
        guard state == .open else { return }
        let before = output.count
        output.append(copying: bytes)
        afterQueue(queuedBefore: before)
    }

    /// Serializes straight into the output queue's staging buffer (no intermediate array).
    public func writeInPlace(_ body: (inout [UInt8]) -> Void) {
        guard state == .open else { return }
        let before = output.count
        output.appendStaging(body)
        afterQueue(queuedBefore: before)
    }

    /// Runs `body` (which may queue many writes) and flushes once afterwards: a burst of small
    /// messages leaves in one `writev` instead of one syscall each. Nests; the outermost flushes.
    public func batchingWrites<E: Error>(_ body: () throws(E) -> Void) throws(E) {
        let outermost = !inReadCallback
        inReadCallback = true
        defer {
            if outermost {
                inReadCallback = false
                if state != .closed { flushNow() }
            }
        }
        try body()
    }

    private func afterQueue(queuedBefore: Int) {
        peakPendingOutputBytes = max(peakPendingOutputBytes, output.count)
        if queuedBefore > limits.highWaterMark && output.count > limits.dropLimit {
            return fail(IOError(call: "write (peer not reading, \(output.count) bytes queued)", errno: ENOBUFS))
        }
        if output.count > limits.highWaterMark { wasAboveHighWater = true }
        if !inReadCallback { flushNow() }
    }

    /// Writes what the socket takes now; arms EPOLLOUT for the rest.
    public func flushNow() {
        guard state != .closed, registration != nil, !connecting else { return }
        let queuedBefore = output.count
        if let tls {
            guard tls.handshakeDone else { return }
            var failure: TLSError?
            output.writeEach { chunk in
                let (n, step) = tls.write(chunk)
                switch step {
                case .failed(let e): failure = e
                case .closed: failure = TLSError(operation: "write", reason: "peer closed")
                // WANT_WRITE: EPOLLOUT stays armed below. WANT_READ (a TLS 1.3 post-handshake message
                // to read first): retried on the next readiness event of either kind.
                case .done, .wantRead, .wantWrite: break
                }
                return n
            }
            if let failure { return fail(failure) }
        } else {
            while !output.isEmpty {
                do {
                    guard case .processed = try output.writePlain(fd: fd) else { break }
                } catch {
                    return fail(error)
                }
            }
        }
        // Counted before any delegate call: `connectionDidDrain` may queue and flush more
        // (re-entering here), and bytes queued then must not cancel out bytes written now.
        let written = queuedBefore - output.count
        totalBytesWritten &+= UInt64(max(0, written))
        updateInterest()
        if written > 0, let onBytesWritten { onBytesWritten() }
        if state == .closed { return }
        if wasAboveHighWater && output.count <= limits.lowWaterMark {
            wasAboveHighWater = false
            delegate?.connectionDidDrain(self)
        }
        if output.isEmpty && state == .closingAfterFlush { halfCloseAndLinger() }
    }

    /// Asks for `connectionDidDrain` once the queue falls to the low-water mark, even if it never
    /// passed the high mark: for a producer that paused at a watermark of its own. False when the
    /// queue already is at or below the low mark (nothing will be called; go on at once).
    public func requestDrainNotification() -> Bool {
        guard state != .closed, output.count > limits.lowWaterMark else { return false }
        wasAboveHighWater = true
        return true
    }

    // MARK: - Closing

    /// Closes once queued output is written: half-close, then read and discard until the peer
    /// closes (at most 2 s), so unread request bytes cannot turn into an RST that destroys the
    /// response in flight (the "lingering close" of RFC 9112 §9.6).
    public func closeAfterFlush() {
        guard state == .open else { return }
        state = .closingAfterFlush
        if output.isEmpty { halfCloseAndLinger() } else { flushNow() }
    }

    private func halfCloseAndLinger() {
        tls?.shutdown()
        if Glibc.shutdown(fd, Int32(SHUT_WR)) != 0 { return finishClose(error: nil) }
        state = .lingering
        readingEnabled = true
        updateInterest()
        loop.scheduleTimer(after: .seconds(2)) { [weak self] in self?.finishClose(error: nil) }
    }

    /// Closes now, dropping queued output.
    public func close() { finishClose(error: nil) }

    private func fail(_ error: any Error) { finishClose(error: error) }

    private func finishClose(error: (any Error)?) {
        guard state != .closed else { return }
        state = .closed
        if let reg = registration { loop.deregister(reg) }
        registration = nil
        if let t = handshakeTimer { loop.cancelTimer(t); handshakeTimer = nil }
        output.removeAll()
        tls = nil
        onBytesWritten = nil
        Syscall.close(fd)
        let d = delegate
        delegate = nil
        d?.connectionDidClose(self, error: error)
    }

    // MARK: - Handshake and interest

    private func armHandshakeTimer(_ timeout: Duration) {
        handshakeTimer = loop.scheduleTimer(after: timeout) { [weak self] in
            guard let self else { return }
            self.handshakeTimer = nil
            if self.connecting || !(self.tls?.handshakeDone ?? true) {
                self.fail(IOError(call: self.connecting ? "connect" : "TLS handshake", errno: ETIMEDOUT))
            }
        }
    }

    private func driveHandshake() {
        guard let tls else { return }
        switch tls.handshake() {
        case .done:
            becameReady()
            if state != .closed { readAvailable() }
        case .wantRead: updateInterest(forceReadable: true)
        case .wantWrite: updateInterest(forceWritable: true)
        case .closed: fail(TLSError(operation: "handshake", reason: "peer closed"))
        case .failed(let e): fail(e)
        }
    }

    private func becameReady() {
        if let t = handshakeTimer { loop.cancelTimer(t); handshakeTimer = nil }
        updateInterest()
        delegate?.connectionIsReady(self)
        if state != .closed { flushNow() }
    }

    private func desiredInterest(forceReadable: Bool = false, forceWritable: Bool = false) -> Interest {
        if connecting { return .writable }
        var i: Interest = []
        if readingEnabled || forceReadable { i.insert(.readable) }
        if !output.isEmpty || forceWritable { i.insert(.writable) }
        return i
    }

    private func updateInterest(forceReadable: Bool = false, forceWritable: Bool = false) {
        guard let reg = registration else { return }
        let want = desiredInterest(forceReadable: forceReadable, forceWritable: forceWritable)
        guard want != interest else { return }
        do {
            try loop.modify(reg, interest: want)
            interest = want
        } catch {
            fail(error)
        }
    }
}
