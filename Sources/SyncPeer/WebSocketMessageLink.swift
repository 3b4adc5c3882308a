// The WebSocket `MessageLink`: one binary message per protocol message (PROTOCOL.md §2), on a
// `WebSocketClientAdapter` (a `SyncLink` dialling `ws://` or `wss://`) or a
// `WebSocketServerAdapter` (an endpoint's accepted socket, `WebSocketMessageLink.handler`). The
// close frame carries the close code and reason both ways; a text message closes the link (4004).
// Credit holds the WebSocket's reading (`holdReading`), so a consumer that takes nothing stops
// the socket being read.
//
// Loop-confined: created, called and calling back on `loop`.

import Sockets
import SyncProtocol
import WebSocket

public final class WebSocketMessageLink: MessageLink, WebSocketClientHandler {
    public let loop: EventLoop
    public let maxMessageSize: Int
    private var client: WebSocketClientAdapter?
    private var server: WebSocketServerAdapter?
    private let ledger: LinkLedger
    /// The subprotocol a dialled link must agree on (nil: any).
    private let subprotocol: String?
    private var open = false
    private var finished = false
    private var closedWith: (code: UInt16, reason: String)?

    private init(loop: EventLoop, maxMessageSize: Int, subprotocol: String?, credit: Int, callbacks: LinkCallbacks) {
        self.loop = loop
        self.maxMessageSize = maxMessageSize
        self.subprotocol = subprotocol
        ledger = LinkLedger(callbacks: callbacks, credit: credit)
    }

    /// Connects to `address` (resolved already) and runs the handshake for `url`, offering
    /// `subprotocol` and requiring the server to agree on it; `callbacks.connected` follows, or
    /// `callbacks.closed` with `wasOpen` false. `configuration.maxMessageSize` is the link's limit.
    public static func connect(url: WebSocketURL, address: SocketAddress, loop: EventLoop, subprotocol: String?,
                               configuration: WebSocketConfiguration, tls: TLSContext?, credit: Int = .max,
                               callbacks: LinkCallbacks) throws(WebSocketClientError) -> WebSocketMessageLink {
        let link = WebSocketMessageLink(loop: loop, maxMessageSize: configuration.maxMessageSize, subprotocol: subprotocol,
                                        credit: credit, callbacks: callbacks)
        link.client = try WebSocketClientAdapter.connect(url: url, address: address, loop: loop,
                                                         handshake: WebSocketClientHandshake(subprotocols: subprotocol.map { [$0] } ?? []),
                                                         configuration: configuration, tls: tls, handler: link)
        return link
    }

    /// A `WebSocketEndpoint` handler whose socket becomes a link once open: `accepted` gets it
    /// (set its callbacks there) before any message is delivered. `maxMessageSize` is the
    /// endpoint's `configuration.maxMessageSize`.
    public static func handler(maxMessageSize: Int, credit: Int = .max,
                               accepted: @escaping (WebSocketMessageLink) -> Void) -> any WebSocketHandler {
        Acceptor(maxMessageSize: maxMessageSize, credit: credit, accepted: accepted)
    }

    public var callbacks: LinkCallbacks {
        get { ledger.callbacks }
        set { ledger.callbacks = newValue }
    }
    private var connection: TCPConnection? { client?.connection ?? server?.connection }
    public var isOpen: Bool { open && !finished && closedWith == nil && (client?.isOpen ?? server?.isOpen ?? false) }
    /// Bytes in the socket's queue (exact after each flush, unlike the WebSocket layer's count).
    public var queuedBytes: Int { finished ? 0 : connection?.pendingOutputBytes ?? 0 }
    public var counters: LinkCounters { ledger.counters(queuedBytes: queuedBytes) }
    public var receiveCredit: Int { ledger.receiveCredit }

    public func send(_ message: [UInt8], completion: SendCompletion?) throws(MessageLinkError) {
        guard message.count <= maxMessageSize else { throw .tooLarge(size: message.count, limit: maxMessageSize) }
        guard isOpen, let connection else { throw .notOpen }
        do {
            if let client { try client.send(.binary(message)) } else { try server?.send(.binary(message)) }
        } catch {
            throw .notOpen
        }
        ledger.sent(message.count, end: connection.totalBytesWritten + UInt64(connection.pendingOutputBytes), completion: completion)
        ledger.written(connection.totalBytesWritten)
    }

    public func batchingSends(_ body: () -> Void) {
        guard let connection, !finished else { return body() }
        connection.batchingWrites(body)
    }

    public func requestDrainNotification() -> Bool {
        guard !finished else { return false }
        return client?.requestDrainNotification() ?? server?.requestDrainNotification() ?? false
    }

    public func grantCredit(_ messages: Int) {
        if ledger.grant(messages), !finished { holdReading(false) }
    }

    /// Starts the close handshake with `code` and `reason` (in the close frame).
    public func close(code: UInt16, reason: String) {
        guard !finished, closedWith == nil else { return }
        closedWith = (code, reason)
        if let client { client.close(WebSocketCloseCode(code), reason: reason) } else { server?.close(WebSocketCloseCode(code), reason: reason) }
    }

    public func abort() {
        guard !finished else { return }
        ledger.aborted = true
        if let client { client.connection?.close() } else { server?.abort() }
    }

    private func holdReading(_ hold: Bool) {
        if let client { client.holdReading(hold) } else { server?.holdReading(hold) }
    }

    private func opened(_ connection: TCPConnection?) {
        open = true
        if let connection { ledger.attach(connection) }
        if ledger.receiveCredit == 0 { holdReading(true) }  // the WebSocket layer decides when the socket is read
    }

    private func received(_ message: WebSocketMessage) {
        guard !finished, closedWith == nil else { return }
        switch message {
        case .binary(let bytes):
            if !ledger.received(bytes) { holdReading(true) }
        case .text:
            close(code: SyncCloseCode.protocolViolation.rawValue, reason: "sync messages are binary (CBOR), not text")
        }
    }

    private func closed(code: WebSocketCloseCode, reason: String) {
        guard !finished else { return }
        finished = true
        let description = "closed (\(code.rawValue)\(reason.isEmpty ? "" : ": " + reason))"
        let close: LinkClose
        if let (ours, why) = closedWith {
            close = LinkClose(origin: .local, code: ours, reason: why, wasOpen: true, description: description)
        } else {
            // 1005 (a close frame without a code) and 1006 (no close frame) are never on the wire.
            let said = code == .noStatusReceived || code == .abnormalClosure ? nil : code.rawValue
            close = LinkClose(origin: .peer, code: said, reason: reason, wasOpen: true, description: description)
        }
        ledger.finish(close)
    }

    // MARK: - WebSocketClientHandler

    public func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement) {
        opened(socket.connection)
        guard subprotocol == nil || agreement.subprotocol == subprotocol else {
            return close(code: SyncCloseCode.protocolViolation.rawValue, reason: "subprotocol not agreed")
        }
        ledger.callbacks.connected()
    }

    public func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage) { received(message) }

    public func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String) {
        closed(code: code, reason: reason)
    }

    public func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError) {
        guard !finished else { return }
        finished = true
        ledger.finish(LinkClose(origin: .peer, code: nil, reason: error.description, wasOpen: false, description: error.description))
    }

    public func webSocketDidDrain(_ socket: WebSocketClientAdapter) { ledger.callbacks.drained() }

    // MARK: - Accepted sockets

    /// The endpoint's handler until its socket opens; then it passes the socket's events to the link.
    private final class Acceptor: WebSocketHandler {
        private let maxMessageSize: Int
        private let credit: Int
        private let accepted: (WebSocketMessageLink) -> Void
        private var link: WebSocketMessageLink?

        init(maxMessageSize: Int, credit: Int, accepted: @escaping (WebSocketMessageLink) -> Void) {
            self.maxMessageSize = maxMessageSize
            self.credit = credit
            self.accepted = accepted
        }

        func webSocketDidOpen(_ socket: WebSocketServerAdapter) {
            let link = WebSocketMessageLink(loop: socket.loop, maxMessageSize: maxMessageSize, subprotocol: socket.subprotocol,
                                            credit: credit, callbacks: .none)
            link.server = socket
            link.opened(socket.connection)
            self.link = link
            accepted(link)
        }

        func webSocket(_ socket: WebSocketServerAdapter, didReceive message: WebSocketMessage) { link?.received(message) }
        func webSocketDidDrain(_ socket: WebSocketServerAdapter) { link?.ledger.callbacks.drained() }

        func webSocketDidClose(_ socket: WebSocketServerAdapter, code: WebSocketCloseCode, reason: String) {
            link?.closed(code: code, reason: reason)
            link = nil
        }
    }
}
