// The byte-stream transport of a `SyncLink` (`tcp://` and `tls://` URLs): a LAN TCP peer link with
// the length-prefixed framing of PROTOCOL.md §2. There is no close frame on a stream, so a side
// that closes on purpose sends `bye` with the close code first (`close(code:reason:)`).
//
// Loop-confined like its `SyncLink`: created, called and calling back on the link's loop.

import Sockets
import SyncProtocol

final class StreamLinkConnection: ConnectionDelegate {
    /// What the link hears from its stream (on the loop).
    typealias Callbacks = LinkCallbacks

    private var connection: TCPConnection?
    private var decoder: StreamFrameDecoder
    private let callbacks: Callbacks
    private var open = false
    private var finished = false
    /// The code and reason this side closed with (said in `bye`), for the link's down message.
    private var closedWith: (code: UInt16, reason: String)?

    private init(maxMessageSize: Int, callbacks: Callbacks) {
        decoder = StreamFrameDecoder(maxMessageSize: maxMessageSize)
        self.callbacks = callbacks
    }

    /// Starts a connection; `callbacks.connected` follows (after the TLS handshake with `tls`),
    /// or `callbacks.closed` with `wasOpen` false.
    static func connect(to address: SocketAddress, loop: EventLoop, tls: TLSContext?, serverName: String?,
                        maxMessageSize: Int, callbacks: Callbacks) throws -> StreamLinkConnection {
        let link = StreamLinkConnection(maxMessageSize: maxMessageSize, callbacks: callbacks)
        link.connection = try TCPConnection.connect(to: address, loop: loop, tls: tls, serverName: serverName, delegate: link)
        return link
    }

    var isOpen: Bool { open && !finished }

    func send(_ message: [UInt8]) {
        guard isOpen else { return }
        connection?.write(StreamFraming.frame(message))
    }

    /// Says `bye` with `code` and closes once it is written. A second call does nothing more.
    func close(code: UInt16, reason: String) {
        guard let connection, !finished, closedWith == nil else { return }
        closedWith = (code, reason)
        if open { connection.write(StreamFraming.frame(SyncMessage.bye(code: code, reason: reason).encode())) }
        connection.closeAfterFlush()
    }

    // MARK: - ConnectionDelegate

    func connectionIsReady(_ connection: TCPConnection) {
        open = true
        callbacks.connected()
    }

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !finished else { return }
        do {
            for message in try decoder.feed(bytes) {
                callbacks.received(message)
                if finished || closedWith != nil { return }  // the delegate closed the link
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "bad frame length \(describe(error))")
        }
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        guard !finished else { return }
        finished = true
        self.connection = nil
        callbacks.closed(LinkCallbacks.reason(closedWith: closedWith, error: error, wasOpen: open), open)
    }

    private func describe(_ error: StreamFrameDecoder.FramingError) -> String {
        switch error { case .invalidLength(let n, let limit): "\(n) (at most \(limit))" }
    }
}
