// A sync link over a packet channel: BLE L2CAP CoC, or its AF_UNIX SEQPACKET stand-in. Messages
// are cut into SDUs of the channel's send MTU and reassembled with `PacketAssembler`
// (PROTOCOL.md §2.1); a keepalive goes out when nothing was sent for a while, and silence past the
// supervision timeout ends the link (BLE loss is silence). A side that closes on purpose says
// `bye` first, as on a TCP link, and the peer's `bye` is how this side learns its reason. A
// `MessageLink`, used by both ends: a node's `BLEPeerListener` (served) and a peer's `SyncLink`
// (dialled). While the consumer has no credit the channel is not read, so supervision counts
// nothing as silence then (the peer's keepalives wait behind its stalled messages).
//
// Loop-confined: created, called and calling back on `loop`. The clock is injected so tests can
// drive supervision by hand (`checkSupervision()`).

import Sockets
import SyncProtocol

public final class PacketSyncLink: MessageLink, PacketConnectionDelegate {
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

    /// The channel's own counters (PROTOCOL.md §2.1 units: SDUs and bytes on the channel, framing
    /// and keepalives included); `counters` has the link's.
    public struct ChannelCounters: Sendable, Equatable {
        public var sdusSent: UInt64 = 0, sdusReceived: UInt64 = 0
        public var bytesSent: UInt64 = 0, bytesReceived: UInt64 = 0
    }

    public let loop: EventLoop
    public let configuration: Configuration
    private var connection: PacketConnection?
    private var assembler: PacketAssembler
    private var supervision: LinkSupervision
    private var supervisionTimer: TimerID?
    private let ledger: LinkLedger
    private var open = false
    private var finished = false
    private var closedWith: (code: UInt16, reason: String)?
    /// Why the link was dropped without `bye` (silence, a peer that stopped reading).
    private var lostReason: String?
    private var channel = ChannelCounters()

    private init(configuration: Configuration, loop: EventLoop, callbacks: Callbacks, credit: Int) {
        self.loop = loop
        self.configuration = configuration
        ledger = LinkLedger(callbacks: callbacks, credit: credit)
        assembler = PacketAssembler(maxMessageSize: configuration.maxMessageSize)
        supervision = LinkSupervision(keepaliveInterval: configuration.keepaliveInterval, timeout: configuration.supervisionTimeout,
                                      now: configuration.clock())
    }

    /// Dials `address`; `callbacks.connected` follows, or `callbacks.closed` with `wasOpen` false.
    /// `credit`: messages the consumer takes before it grants more.
    public static func connect(to address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(),
                               configuration: Configuration, loop: EventLoop, credit: Int = .max,
                               callbacks: Callbacks) throws(PacketSocketError) -> PacketSyncLink {
        let link = PacketSyncLink(configuration: configuration, loop: loop, callbacks: callbacks, credit: credit)
        link.adopt(try PacketConnection.connect(to: address, options: options, loop: loop, delegate: link))
        return link
    }

    /// Adopts an accepted, non-blocking channel (open at once: `callbacks.connected` is not called). The
    /// descriptor is closed here if registering fails.
    public static func accepted(fd: Int32, address: PacketLinkAddress, options: PacketSocketOptions = PacketSocketOptions(),
                                configuration: Configuration, loop: EventLoop, credit: Int = .max,
                                callbacks: Callbacks) throws(IOError) -> PacketSyncLink {
        let link = PacketSyncLink(configuration: configuration, loop: loop, callbacks: callbacks, credit: credit)
        let connection = PacketConnection(fd: fd, address: address, options: options, loop: loop)
        connection.delegate = link
        link.adopt(connection)
        do { try connection.start() } catch {
            Syscall.close(fd)
            throw error
        }
        link.opened()
        return link
    }

    public var callbacks: LinkCallbacks {
        get { ledger.callbacks }
        set { ledger.callbacks = newValue }
    }
    public var maxMessageSize: Int { configuration.maxMessageSize }
    public var isOpen: Bool { open && !finished && closedWith == nil }
    public var counters: LinkCounters { ledger.counters(queuedBytes: queuedBytes) }
    public var channelCounters: ChannelCounters {
        guard let connection else { return channel }
        return ChannelCounters(sdusSent: connection.packetsSent, sdusReceived: connection.packetsReceived,
                               bytesSent: connection.bytesSent, bytesReceived: connection.bytesReceived)
    }
    public var receiveCredit: Int { ledger.receiveCredit }
    /// Bytes waiting to be handed to the channel.
    public var queuedBytes: Int { connection?.queuedBytes ?? 0 }
    public var sendMTU: Int { connection?.sendMTU ?? 0 }
    public var receiveMTU: Int { connection?.receiveMTU ?? 0 }

    /// Sends one message. A peer that lets the queue pass `dropLimit` is dropped.
    public func send(_ message: [UInt8], completion: SendCompletion?) throws(MessageLinkError) {
        guard message.count <= maxMessageSize else { throw .tooLarge(size: message.count, limit: maxMessageSize) }
        guard isOpen, let connection else { throw .notOpen }
        write(message)
        ledger.sent(message.count, end: connection.bytesSent + UInt64(connection.queuedBytes), completion: completion)
        ledger.written(connection.bytesWritten)
        if queuedBytes > configuration.dropLimit { fail("peer stopped reading: \(queuedBytes) bytes queued") }
    }

    /// Every SDU is a send of its own: nothing to batch.
    public func batchingSends(_ body: () -> Void) { body() }

    /// True when the queue is above its low-water mark: `callbacks.drained` follows once it is not.
    public func requestDrainNotification() -> Bool { connection?.requestDrainNotification() ?? false }

    public func grantCredit(_ messages: Int) {
        guard ledger.grant(messages), !finished, let connection else { return }
        // The silence while the channel was not read was ours, not the peer's.
        supervision.received(at: configuration.clock())
        connection.resumeReading()
    }

    public func abort() {
        guard let connection, !finished else { return }
        ledger.aborted = true
        connection.close()
    }

    private func adopt(_ connection: PacketConnection) {
        self.connection = connection
        ledger.attach(connection)
    }

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
        guard open, !finished else { return }
        if ledger.isHolding || ledger.receiveCredit == 0 { supervision.received(at: configuration.clock()) }  // not reading: no silence
        switch supervision.check(at: configuration.clock()) {
        case .none: break
        case .sendKeepalive:
            ledger.keepaliveSent()
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
        if self.connection == nil { adopt(connection) }
        opened()
        ledger.callbacks.connected()
    }

    public func packetConnection(_ connection: PacketConnection, didReceive packet: UnsafeRawBufferPointer) {
        guard !finished else { return }
        supervision.received(at: configuration.clock())
        do {
            switch try assembler.feed(packet) {
            case .message(let m):
                if ledger.peerBye == nil, let bye = LinkCallbacks.bye(in: m) { ledger.peerBye = bye }
                guard closedWith == nil else { return }
                if !ledger.received(m) { connection.pauseReading() }
            case .keepalive: ledger.keepaliveReceived()
            case .partial: break
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "\(error)")
        }
    }

    public func packetConnectionDidDrain(_ connection: PacketConnection) { ledger.callbacks.drained() }

    public func packetConnectionDidClose(_ connection: PacketConnection, error: (any Error)?) {
        guard !finished else { return }
        finished = true
        channel = channelCounters
        self.connection = nil
        if let t = supervisionTimer { loop.cancelTimer(t); supervisionTimer = nil }
        var close = LinkCallbacks.close(closedWith: closedWith, error: error, peerBye: ledger.peerBye, wasOpen: open)
        if let lostReason { (close.code, close.reason, close.description) = (nil, lostReason, lostReason) }
        ledger.finish(close)
    }
}
