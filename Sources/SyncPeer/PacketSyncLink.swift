// A sync link over a packet channel: BLE L2CAP CoC, or its AF_UNIX SEQPACKET stand-in. Messages
// are cut into SDUs of the channel's send MTU and reassembled with `PacketAssembler`
// (PROTOCOL.md §2.1); a keepalive goes out when nothing was sent for a while, and silence past the
// supervision timeout ends the link (BLE loss is silence). A side that closes on purpose says
// `bye` first, as on a TCP link. Used by both ends: a node's `BLEPeerListener` (served) and a
// peer's `SyncLink` (dialled).
//
// Loop-confined: created, called and calling back on `loop`. The clock is injected so tests can
// drive supervision by hand (`checkSupervision()`).

import Sockets
import SyncProtocol

public final class PacketSyncLink: PacketConnectionDelegate {
    public struct Configuration: Sendable {
        public var maxMessageSize: Int
        public var keepaliveInterval: Duration = .seconds(5)
        public var supervisionTimeout: Duration = .seconds(20)
        /// Where "now" comes from (supervision only).
        public var clock: @Sendable () -> NanoTime = { NanoTime.now() }
        /// Queued bytes past which a peer that stopped reading is dropped (a message and 4 MiB, as TCP links).
        public var dropLimit: Int

        public init(maxMessageSize: Int) {
            self.maxMessageSize = maxMessageSize
            dropLimit = maxMessageSize + (4 << 20)
        }
    }

    public typealias Callbacks = LinkCallbacks

    /// Per-link counters (PROTOCOL.md §2.1 units: messages, SDUs, bytes on the channel).
    public struct Counters: Sendable, Equatable {
        public var messagesSent = 0, messagesReceived = 0
        public var keepalivesSent = 0, keepalivesReceived = 0
        public var sdusSent: UInt64 = 0, sdusReceived: UInt64 = 0
        public var bytesSent: UInt64 = 0, bytesReceived: UInt64 = 0
    }

    public let loop: EventLoop
    public let configuration: Configuration
    private var connection: PacketConnection?
    private var assembler: PacketAssembler
    private var supervision: LinkSupervision
    private var supervisionTimer: TimerID?
    private let callbacks: Callbacks
    private var open = false
    private var finished = false
    private var closedWith: (code: UInt16, reason: String)?
    /// Why the link was dropped without `bye` (silence, a peer that stopped reading).
    private var lostReason: String?
    private var counts = Counters()

    private init(configuration: Configuration, loop: EventLoop, callbacks: Callbacks) {
        self.loop = loop
        self.configuration = configuration
        self.callbacks = callbacks
        assembler = PacketAssembler(maxMessageSize: configuration.maxMessageSize)
        supervision = LinkSupervision(keepaliveInterval: configuration.keepaliveInterval, timeout: configuration.supervisionTimeout,
                                      now: configuration.clock())
    }

    /// Dials `address`; `callbacks.connected` follows, or `callbacks.closed` with `wasOpen` false.
    public static func connect(to address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(),
                               configuration: Configuration, loop: EventLoop, callbacks: Callbacks) throws(PacketSocketError) -> PacketSyncLink {
        let link = PacketSyncLink(configuration: configuration, loop: loop, callbacks: callbacks)
        link.connection = try PacketConnection.connect(to: address, options: options, loop: loop, delegate: link)
        return link
    }

    /// Adopts an accepted, non-blocking channel (open at once: `callbacks.connected` is not called). The
    /// descriptor is closed here if registering fails.
    public static func accepted(fd: Int32, address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(),
                                configuration: Configuration, loop: EventLoop, callbacks: Callbacks) throws(IOError) -> PacketSyncLink {
        let link = PacketSyncLink(configuration: configuration, loop: loop, callbacks: callbacks)
        let connection = PacketConnection(fd: fd, address: address, options: options, loop: loop)
        connection.delegate = link
        link.connection = connection
        do { try connection.start() } catch {
            Syscall.close(fd)
            throw error
        }
        link.opened()
        return link
    }

    public var isOpen: Bool { open && !finished }
    public var counters: Counters {
        var c = counts
        if let connection {
            (c.sdusSent, c.sdusReceived) = (connection.packetsSent, connection.packetsReceived)
            (c.bytesSent, c.bytesReceived) = (connection.bytesSent, connection.bytesReceived)
        }
        return c
    }
    /// Bytes waiting to be handed to the channel.
    public var queuedBytes: Int { connection?.queuedBytes ?? 0 }
    public var sendMTU: Int { connection?.sendMTU ?? 0 }
    public var receiveMTU: Int { connection?.receiveMTU ?? 0 }

    /// Sends one message (dropped when the link is not open). A peer that lets the queue pass
    /// `dropLimit` is dropped.
    public func send(_ message: [UInt8]) {
        guard isOpen, closedWith == nil else { return }
        counts.messagesSent += 1
        write(message)
        if queuedBytes > configuration.dropLimit { fail("peer stopped reading: \(queuedBytes) bytes queued") }
    }

    /// True when the queue is above its low-water mark: `callbacks.drained` follows once it is not.
    public func requestDrainNotification() -> Bool { connection?.requestDrainNotification() ?? false }

    /// Says `bye` with `code` and closes once it is written. A second call does nothing more.
    public func close(code: UInt16, reason: String) {
        guard let connection, !finished, closedWith == nil else { return }
        closedWith = (code, reason)
        if open { write(SyncMessage.bye(code: code, reason: reason).encode()) }
        connection.closeAfterFlush()
    }

    /// Acts on what supervision says is due now (the loop's timer calls this; tests too, after
    /// moving their clock).
    public func checkSupervision() {
        guard isOpen else { return }
        switch supervision.check(at: configuration.clock()) {
        case .none: break
        case .sendKeepalive:
            counts.keepalivesSent += 1
            sendSDU(PacketFraming.keepalive)
        case .lost:
            return fail("link lost: nothing received for \(configuration.supervisionTimeout)")
        }
        armSupervision()
    }

    // MARK: - Internals

    private func write(_ message: [UInt8]) {
        guard let connection else { return }
        for sdu in PacketFraming.sdus(message, mtu: connection.sendMTU) { sendSDU(sdu) }
    }

    private func sendSDU(_ sdu: [UInt8]) {
        guard let connection else { return }
        do { try connection.send(sdu) } catch { return fail("\(error)") }
        supervision.sent(at: configuration.clock())
    }

    private func opened() {
        open = true
        let now = configuration.clock()
        supervision = LinkSupervision(keepaliveInterval: configuration.keepaliveInterval, timeout: configuration.supervisionTimeout, now: now)
        armSupervision()
    }

    private func armSupervision() {
        if let t = supervisionTimer { loop.cancelTimer(t) }
        let wait = supervision.nextDeadline.duration(since: configuration.clock())
        supervisionTimer = loop.scheduleTimer(after: max(wait, .milliseconds(1))) { [weak self] in
            self?.supervisionTimer = nil
            self?.checkSupervision()
        }
    }

    private func fail(_ reason: String) {
        guard !finished else { return }
        closedWith = closedWith ?? (SyncCloseCode.goingAway.rawValue, reason)
        lostReason = reason
        connection?.close()
    }

    // MARK: - PacketConnectionDelegate

    public func packetConnectionIsReady(_ connection: PacketConnection) {
        opened()
        callbacks.connected()
    }

    public func packetConnection(_ connection: PacketConnection, didReceive packet: UnsafeRawBufferPointer) {
        guard !finished else { return }
        supervision.received(at: configuration.clock())
        do {
            switch try assembler.feed(packet) {
            case .message(let m):
                counts.messagesReceived += 1
                if closedWith == nil { callbacks.received(m) }
            case .keepalive: counts.keepalivesReceived += 1
            case .partial: break
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "\(error)")
        }
    }

    public func packetConnectionDidDrain(_ connection: PacketConnection) { callbacks.drained() }

    public func packetConnectionDidClose(_ connection: PacketConnection, error: (any Error)?) {
        guard !finished else { return }
        finished = true
        counts = counters
        self.connection = nil
        if let t = supervisionTimer { loop.cancelTimer(t); supervisionTimer = nil }
        callbacks.closed(lostReason ?? LinkCallbacks.reason(closedWith: closedWith, error: error, wasOpen: open), open)
    }
}
