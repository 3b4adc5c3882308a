// The byte-stream `MessageLink` (`tcp://` and `tls://` URLs, and the LAN TCP links a node or a
// small peer accepts): the length-prefixed framing of PROTOCOL.md §2. There is no close frame on
// a stream, so a side that closes on purpose sends `bye` with the close code first
// (`close(code:reason:)`), and the peer's `bye` is how this side learns its reason.
//
// Loop-confined: created, called and calling back on `loop`.

import Sockets
import SyncProtocol

public final class StreamLinkConnection: MessageLink, ConnectionDelegate {
    public let loop: EventLoop
    public let maxMessageSize: Int
    private var connection: TCPConnection?
    private var decoder: StreamFrameDecoder
    private let ledger: LinkLedger
    private var open = false
    private var finished = false
    /// The code and reason this side closed with (said in `bye`), for the link's down message.
    private var closedWith: (code: UInt16, reason: String)?

    private init(loop: EventLoop, maxMessageSize: Int, maxFirstMessageSize: Int? = nil, callbacks: LinkCallbacks, credit: Int) {
        self.loop = loop
        self.maxMessageSize = maxMessageSize
        decoder = StreamFrameDecoder(maxMessageSize: maxMessageSize, maxFirstMessageSize: maxFirstMessageSize)
        ledger = LinkLedger(callbacks: callbacks, credit: credit)
    }

    /// Starts a connection; `callbacks.connected` follows (after the TLS handshake with `tls`),
    /// or `callbacks.closed` with `wasOpen` false. `credit`: messages the consumer takes before
    /// it grants more.
    public static func connect(to address: SocketAddress, loop: EventLoop, tls: TLSContext?, serverName: String?,
                               maxMessageSize: Int, credit: Int = .max, callbacks: LinkCallbacks) throws -> StreamLinkConnection {
        let link = StreamLinkConnection(loop: loop, maxMessageSize: maxMessageSize, callbacks: callbacks, credit: credit)
        let connection = try TCPConnection.connect(to: address, loop: loop, tls: tls, serverName: serverName, delegate: link)
        link.adopt(connection)
        return link
    }

    /// Adopts an accepted descriptor (closed here if that fails) with the served links' write
    /// limits (`servedSyncLink`). Plain TCP is open at once; with `tls`, `callbacks.connected`
    /// follows the handshake. `maxFirstMessageSize`: the peer's first message (its `hello`) may
    /// be at most this (`SyncLimits.maxHelloBytes`).
    public static func accepted(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?, maxMessageSize: Int,
                                maxFirstMessageSize: Int? = nil, credit: Int = .max, callbacks: LinkCallbacks) throws -> StreamLinkConnection {
        let link = StreamLinkConnection(loop: loop, maxMessageSize: maxMessageSize, maxFirstMessageSize: maxFirstMessageSize,
                                        callbacks: callbacks, credit: credit)
        let connection = try TCPConnection.servedSyncLink(fd: fd, remote: remote, loop: loop, tls: tls, maxMessageSize: maxMessageSize)
        connection.delegate = link
        do { try connection.start() } catch {
            connection.delegate = nil
            connection.close()
            throw error
        }
        link.adopt(connection)
        if !connection.isTLS { link.open = true }
        return link
    }

    public var callbacks: LinkCallbacks {
        get { ledger.callbacks }
        set { ledger.callbacks = newValue }
    }
    public var isOpen: Bool { open && !finished && closedWith == nil }
    public var queuedBytes: Int { connection?.pendingOutputBytes ?? 0 }
    public var counters: LinkCounters { ledger.counters(queuedBytes: queuedBytes) }
    public var receiveCredit: Int { ledger.receiveCredit }
    /// Whether the stream is TLS.
    public var isTLS: Bool { connection?.isTLS ?? false }

    public func send(_ message: [UInt8], completion: SendCompletion?) throws(MessageLinkError) {
        guard message.count <= maxMessageSize else { throw .tooLarge(size: message.count, limit: maxMessageSize) }
        guard isOpen, let connection else { throw .notOpen }
        connection.write(StreamFraming.frame(message))
        ledger.sent(message.count, end: connection.totalBytesWritten + UInt64(connection.pendingOutputBytes), completion: completion)
        ledger.written(connection.bytesWritten)
    }

    public func batchingSends(_ body: () -> Void) {
        guard let connection else { return body() }
        connection.batchingWrites(body)
    }

    public func requestDrainNotification() -> Bool { connection?.requestDrainNotification() ?? false }

    public func grantCredit(_ messages: Int) {
        if ledger.grant(messages), !finished { connection?.resumeReading() }
    }

    /// Says `bye` with `code` and closes once it is written. A second call does nothing more.
    public func close(code: UInt16, reason: String) {
        guard let connection, !finished, closedWith == nil else { return }
        closedWith = (code, reason)
        if open { connection.write(StreamFraming.frame(SyncMessage.bye(code: code, reason: reason).encode())) }
        connection.closeAfterFlush()
    }

    public func abort() {
        guard let connection, !finished else { return }
        ledger.aborted = true
        connection.close()
    }

    private func adopt(_ connection: TCPConnection) {
        self.connection = connection
        ledger.attach(connection)
    }

    // MARK: - ConnectionDelegate

    public func connectionIsReady(_ connection: TCPConnection) {
        if self.connection == nil { adopt(connection) }  // a connect that completed inside `connect`
        open = true
        ledger.callbacks.connected()
    }

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !finished else { return }
        do {
            for message in try decoder.feed(bytes) {
                if ledger.peerBye == nil, let bye = LinkCallbacks.bye(in: message) { ledger.peerBye = bye }
                if !ledger.received(message) { connection.pauseReading() }
                if finished || closedWith != nil { return }  // the consumer closed the link
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "bad frame length \(describe(error))")
        }
    }

    public func connectionDidDrain(_ connection: TCPConnection) { ledger.callbacks.drained() }

    public func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        guard !finished else { return }
        finished = true
        self.connection = nil
        ledger.finish(LinkCallbacks.close(closedWith: closedWith, error: error, peerBye: ledger.peerBye, wasOpen: open))
    }

    private func describe(_ error: StreamFrameDecoder.FramingError) -> String {
        switch error { case .invalidLength(let n, let limit): "\(n) (at most \(limit))" }
    }
}
