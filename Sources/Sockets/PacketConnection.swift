import CEpoll
import Glibc

/// Receives a packet connection's events, always on its loop.
public protocol PacketConnectionDelegate: AnyObject {
    /// Connected (client side; an accepted connection is ready at once and does not get this).
    func packetConnectionIsReady(_ connection: PacketConnection)
    /// One packet (SDU), whole. The buffer is valid only during the call.
    func packetConnection(_ connection: PacketConnection, didReceive packet: UnsafeRawBufferPointer)
    /// The send queue fell to the low-water mark after `requestDrainNotification`.
    func packetConnectionDidDrain(_ connection: PacketConnection)
    /// Closed for good; `error` nil for an orderly close (ours, or the peer's EOF).
    func packetConnectionDidClose(_ connection: PacketConnection, error: (any Error)?)
}

/// A packet too large for the link, or one the peer sent above our receive MTU.
public struct PacketSizeError: Error, Sendable, Equatable, CustomStringConvertible {
    public let size: Int
    public let mtu: Int
    public var description: String { "packet of \(size) bytes above the MTU \(mtu)" }
}

/// A non-blocking SEQPACKET connection (L2CAP CoC or its AF_UNIX stand-in) owned by one loop:
/// every `send` is one packet, never merged with another or split; every receive is one packet.
/// Packets wait in a queue while the kernel's (on L2CAP: the peer's credits) are full, and
/// `EPOLLOUT` is watched only then.
///
/// Not `Sendable`: every method must be called on `loop`.
public final class PacketConnection {
    public let loop: EventLoop
    public let fd: Int32
    public let address: PacketLinkAddress
    public var delegate: (any PacketConnectionDelegate)?
    /// Largest packet this side may send (`BT_SNDMTU`: the peer's receive MTU).
    public private(set) var sendMTU: Int
    /// Largest packet accepted (`BT_RCVMTU`).
    public private(set) var receiveMTU: Int
    /// `requestDrainNotification` reports once the queue is at or below this.
    public var lowWaterMark = 16 << 10

    public private(set) var packetsSent: UInt64 = 0
    public private(set) var bytesSent: UInt64 = 0
    public private(set) var packetsReceived: UInt64 = 0
    public private(set) var bytesReceived: UInt64 = 0

    private let options: PacketSocketOptions
    private var registration: Registration?
    private var queue: [[UInt8]] = []
    private var head = 0
    public private(set) var queuedBytes = 0
    private var connecting = false
    private var drainRequested = false
    private var closeWhenFlushed = false
    /// Half-closed after the last packet, reading and dropping until the peer closes too.
    private var lingering = false
    private var closed = false
    private var watchingWritable = false
    private var watchingReadable = true

    private var readingEnabled = true

    public var isClosed: Bool { closed }
    /// Called after a flush handed packets to the kernel, once `bytesSent` has moved (for send
    /// completions); nil by default.
    public var onBytesWritten: (() -> Void)?

    /// Adopts a connected or accepted non-blocking descriptor; `start()` registers it. Must run on `loop`.
    public init(fd: Int32, address: PacketLinkAddress, options: PacketSocketOptions, loop: EventLoop) {
        loop.assertInLoop()
        self.fd = fd
        self.address = address
        self.options = options
        self.loop = loop
        (sendMTU, receiveMTU) = (options.standInMTU, options.standInMTU)
        if case .l2cap = address, let mtus = try? PacketSockets.l2capMTUs(of: fd) { (sendMTU, receiveMTU) = mtus }
    }

    /// Starts a non-blocking connect; `delegate.packetConnectionIsReady` or `…DidClose` follows.
    public static func connect(to address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(), loop: EventLoop,
                               delegate: any PacketConnectionDelegate) throws(PacketSocketError) -> PacketConnection {
        loop.assertInLoop()
        let fd = try PacketSockets.open(for: address, options: options)
        let c = PacketConnection(fd: fd, address: address, options: options, loop: loop)
        c.delegate = delegate
        let rc = PacketSockets.withSockaddr(address) { Glibc.connect(fd, $0, $1) }
        let e = rc == 0 ? 0 : bp_errno()
        guard rc == 0 || e == EINPROGRESS || e == EAGAIN else {
            Syscall.close(fd)
            let error = IOError(call: "connect(\(address))", errno: e)
            if case .l2cap = address { throw PacketSockets.classify(error) }
            throw .io(error)
        }
        // Even a connect that completed at once (AF_UNIX always does) reports through epoll, so
        // the caller holds the connection before `packetConnectionIsReady` runs.
        c.connecting = true
        do { try c.start() } catch {
            Syscall.close(fd)
            throw .io(error)
        }
        return c
    }

    /// Registers with the loop. Call once, after setting `delegate`.
    public func start() throws(IOError) {
        loop.assertInLoop()
        var interest: Interest = connecting ? .writable : []
        if readingEnabled || connecting { interest.insert(.readable) }
        registration = try loop.register(fd: fd, interest: interest) { [self] ready in
            self.handle(ready)
        }
        (watchingWritable, watchingReadable) = (connecting, readingEnabled)
    }

    /// Queues one packet. A packet above `sendMTU` is refused (as L2CAP refuses it: EMSGSIZE).
    public func send(_ packet: [UInt8]) throws(PacketSizeError) {
        guard packet.count <= sendMTU else { throw PacketSizeError(size: packet.count, mtu: sendMTU) }
        guard !closed, !closeWhenFlushed else { return }
        queue.append(packet)
        queuedBytes += packet.count
        if !connecting { flush() }
    }

    /// Whether a drain notification is due: true when the queue is above the low-water mark (then
    /// `packetConnectionDidDrain` follows once it is not); false when already drained.
    public func requestDrainNotification() -> Bool {
        guard !closed, queuedBytes > lowWaterMark else { return false }
        drainRequested = true
        return true
    }

    /// Closes once every queued packet is handed to the kernel: half-closes, then reads and drops
    /// until the peer closes (at most 2 s). Closing with the peer's packets unread would reset an
    /// AF_UNIX peer (ECONNRESET) before it read our last ones, the `bye` among them. On L2CAP the
    /// kernel's shutdown disconnects the channel (not tried on a radio); the read that follows
    /// sees the end and finishes the close.
    public func closeAfterFlush() {
        guard !closed else { return }
        closeWhenFlushed = true
        if queuedBytes == 0 && !connecting { linger() }
    }

    private func linger() {
        guard !lingering, !closed else { return }
        guard Glibc.shutdown(fd, Int32(SHUT_WR)) == 0 else { return finish(error: nil) }
        lingering = true
        readingEnabled = true
        updateInterest()
        loop.scheduleTimer(after: .seconds(2)) { [weak self] in self?.finish(error: nil) }
    }

    public func close() { finish(error: nil) }

    /// Stops reading (backpressure toward the peer: on L2CAP it runs out of credits, on the
    /// stand-in its sends find the receive queue full).
    public func pauseReading() { setReading(false) }
    public func resumeReading() { setReading(true) }

    private func setReading(_ on: Bool) {
        guard on != readingEnabled else { return }
        readingEnabled = on
        updateInterest()
    }

    // MARK: - Events

    private func becameReady() {
        if case .l2cap = address, let mtus = try? PacketSockets.l2capMTUs(of: fd) { (sendMTU, receiveMTU) = mtus }
        delegate?.packetConnectionIsReady(self)
        if !closed { flush() }
    }

    private func handle(_ ready: Readiness) {
        if connecting {
            connecting = false
            let err = SocketOps.pendingError(fd)
            if err != 0 { return finish(error: IOError(call: "connect(\(address))", errno: err)) }
            updateInterest()
            becameReady()
            return
        }
        if ready.isWritable && queuedBytes > 0 { flush() }
        // A hang-up is reported whatever the interest (level-triggered): read what is left even
        // while paused, or the loop would spin on it.
        if !closed && ready.isReadable && (readingEnabled || ready.isHangup) { readAvailable(evenIfPaused: ready.isHangup) }
    }

    private func readAvailable(evenIfPaused: Bool) {
        let buf = loop.readBuffer
        var budget = 16  // packets per wake-up: fairness between connections
        while budget > 0 && !closed && (readingEnabled || evenIfPaused) {
            budget -= 1
            let r: IOResult<Int>
            do {
                r = try Syscall.nonBlocking("recv") { Glibc.recv(fd, buf.baseAddress, buf.count, Int32(MSG_TRUNC)) }
            } catch {
                return finish(error: error)
            }
            guard case .processed(let n) = r else { return }
            if n == 0 { return finish(error: nil) }  // EOF: this link never sends empty packets
            if lingering { continue }
            guard n <= receiveMTU, n <= buf.count else { return finish(error: PacketSizeError(size: n, mtu: receiveMTU)) }
            packetsReceived += 1
            bytesReceived += UInt64(n)
            delegate?.packetConnection(self, didReceive: UnsafeRawBufferPointer(rebasing: buf[0..<n]))
        }
    }

    private func flush() {
        let headBefore = head
        while head < queue.count && !closed {
            let packet = queue[head]
            let r: IOResult<Int>
            do {
                r = try Syscall.nonBlocking("send") {
                    packet.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
                }
            } catch {
                return finish(error: error)
            }
            guard case .processed = r else { break }
            head += 1
            queuedBytes -= packet.count
            packetsSent += 1
            bytesSent += UInt64(packet.count)
        }
        let wrote = head > headBefore
        if head == queue.count {
            queue.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 1024 {
            queue.removeFirst(head)
            head = 0
        }
        updateInterest()
        if wrote, let onBytesWritten { onBytesWritten() }
        if closed { return }
        if closeWhenFlushed && queuedBytes == 0 { return linger() }
        if drainRequested && queuedBytes <= lowWaterMark {
            drainRequested = false
            delegate?.packetConnectionDidDrain(self)
        }
    }

    private func updateInterest() {
        let writable = queuedBytes > 0 || connecting
        guard writable != watchingWritable || readingEnabled != watchingReadable, let registration else { return }
        (watchingWritable, watchingReadable) = (writable, readingEnabled)
        var interest: Interest = writable ? .writable : []
        if readingEnabled || connecting { interest.insert(.readable) }
        try? loop.modify(registration, interest: interest)
    }

    private func finish(error: (any Error)?) {
        guard !closed else { return }
        closed = true
        if let registration { loop.deregister(registration) }
        registration = nil
        queue.removeAll()
        queuedBytes = 0
        onBytesWritten = nil
        Syscall.close(fd)
        let d = delegate
        delegate = nil
        d?.packetConnectionDidClose(self, error: error)
    }
}
