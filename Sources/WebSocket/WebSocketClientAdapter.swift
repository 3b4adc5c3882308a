// The client-side I/O adapter: `ws://` over `TCPConnection.connect`, `wss://` over its TLS, the
// opening handshake (RFC 6455 §4.1) on the event loop, then the same `WebSocketIODriver` as the
// server in client role (masked frames, waits for the server to close TCP, §7.1.1).
//
//   connect ─▶ ready ─▶ GET + Upgrade ─▶ read head (≤ 16 KiB, ≤ handshakeTimeout) ─▶ verify
//                                                                  │ fail → didFailToConnect
//                                                                  ▼
//                                        WebSocketIODriver(role: .client) ◀──▶ WebSocketClientHandler
import Sockets

/// A `ws://` or `wss://` URL, split (RFC 6455 §3).
public struct WebSocketURL: Sendable, Hashable {
    public var secure: Bool
    public var host: String
    public var port: Int
    /// Path and query, as sent in the request line ("/" when empty).
    public var target: String

    /// Parses `ws://host[:port][/path][?query]` (IPv6 hosts in brackets); nil for anything else,
    /// including fragments (§3: "MUST NOT" be used).
    public init?(_ text: String) {
        let rest: Substring
        if text.hasPrefix("ws://") { secure = false; rest = text.dropFirst(5) }
        else if text.hasPrefix("wss://") { secure = true; rest = text.dropFirst(6) }
        else { return nil }
        guard !rest.contains("#") else { return nil }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var t = String(rest[authorityEnd...])
        if t.isEmpty || t.first == "?" { t = "/" + t }
        target = t
        var portText: Substring?
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty { guard after.first == ":" else { return nil }; portText = after.dropFirst() }
        } else if let colon = authority.lastIndex(of: ":") {
            host = String(authority[..<colon])
            portText = authority[authority.index(after: colon)...]
        } else {
            host = String(authority)
        }
        guard !host.isEmpty, !host.contains("@") else { return nil }
        if let portText {
            guard let p = Int(portText), (1...65535).contains(p) else { return nil }
            port = p
        } else {
            port = secure ? 443 : 80
        }
    }

    /// The `Host` header value (§4.1 item 4): the port only when it is not the default.
    public var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? h : "\(h):\(port)"
    }
}

/// Why a client connection did not open.
public enum WebSocketClientError: Error, Hashable, Sendable, CustomStringConvertible {
    case connectFailed(String)
    case handshakeTimedOut
    case responseHeadTooLarge
    case closedDuringHandshake
    case refused(status: Int)
    case handshakeInvalid(String)

    public var description: String {
        switch self {
        case .connectFailed(let why): "connect failed: \(why)"
        case .handshakeTimedOut: "the server did not answer the upgrade in time"
        case .responseHeadTooLarge: "the upgrade response head exceeds 16 KiB"
        case .closedDuringHandshake: "the server closed the connection during the handshake"
        case .refused(let status): "the server refused the upgrade with status \(status)"
        case .handshakeInvalid(let why): "invalid upgrade response: \(why)"
        }
    }
}

/// The application side of a client WebSocket; every call arrives on the adapter's loop.
public protocol WebSocketClientHandler: AnyObject {
    /// The handshake succeeded; sending is allowed from here on.
    func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement)
    func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage)
    /// Exactly once after `webSocketDidConnect`.
    func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String)
    /// The connection never opened (instead of the three calls above).
    func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError)
    /// The output queue fell to the low-water mark after `requestDrainNotification`.
    func webSocketDidDrain(_ socket: WebSocketClientAdapter)
}

extension WebSocketClientHandler {
    public func webSocketDidDrain(_ socket: WebSocketClientAdapter) {}
}

/// One client WebSocket, owned by its event loop (same threading rules as the server adapter:
/// create it and call it on `loop`; other threads use `LoopBound` + `loop.execute`).
public final class WebSocketClientAdapter: ConnectionDelegate {
    public let url: WebSocketURL
    public private(set) var connection: TCPConnection?
    public let loop: EventLoop
    private let handshake: WebSocketClientHandshake
    private let configuration: WebSocketConfiguration
    private var handler: (any WebSocketClientHandler)?
    private var responseHead: [UInt8] = []
    private var driver: WebSocketIODriver?
    private var handshakeTimer: TimerID?
    private let handshakeTimeout: Duration
    static let maxResponseHead = 16 * 1024

    /// Connects to `address` (already resolved: `SocketAddress.resolve` blocks, so call it off
    /// the loop; numeric hosts resolve at once) and runs the handshake for `url`. For `wss://`,
    /// `tls` must be a client context; the certificate is checked against `url.host`.
    public static func connect(
        url: WebSocketURL, address: SocketAddress, loop: EventLoop, handshake: WebSocketClientHandshake,
        configuration: WebSocketConfiguration = WebSocketConfiguration(), tls: TLSContext? = nil,
        handshakeTimeout: Duration = .seconds(10), handler: any WebSocketClientHandler
    ) throws(WebSocketClientError) -> WebSocketClientAdapter {
        loop.assertInLoop()
        if url.secure && tls == nil { throw .connectFailed("wss:// needs a TLS client context") }
        let adapter = WebSocketClientAdapter(url: url, loop: loop, handshake: handshake, configuration: configuration,
                                             handshakeTimeout: handshakeTimeout, handler: handler)
        do {
            adapter.connection = try TCPConnection.connect(
                to: address, loop: loop, tls: url.secure ? tls : nil, serverName: url.secure ? url.host : nil,
                timeout: handshakeTimeout, delegate: adapter)
        } catch {
            throw .connectFailed("\(error)")
        }
        adapter.armHandshakeTimer()
        return adapter
    }

    private init(url: WebSocketURL, loop: EventLoop, handshake: WebSocketClientHandshake, configuration: WebSocketConfiguration,
                 handshakeTimeout: Duration, handler: any WebSocketClientHandler) {
        self.url = url
        self.loop = loop
        self.handshake = handshake
        self.configuration = configuration
        self.handshakeTimeout = handshakeTimeout
        self.handler = handler
    }

    // MARK: - Application API

    public var isOpen: Bool { driver?.isOpen ?? false }
    public var queuedBytes: Int { driver?.queuedBytes ?? 0 }

    /// Sends a message; `.notOpen` before the handshake finished or once closing.
    public func send(_ message: WebSocketMessage) throws(WebSocketSendError) {
        loop.assertInLoop()
        guard let driver else { throw .notOpen }
        try driver.send(message)
    }

    public func ping(_ payload: [UInt8] = []) throws(WebSocketSendError) {
        loop.assertInLoop()
        guard let driver else { throw .notOpen }
        try driver.ping(payload)
    }

    /// Asks for `webSocketDidDrain` once the output queue falls to the low-water mark. False when
    /// it already is there, or the socket is not open (no call follows).
    public func requestDrainNotification() -> Bool {
        loop.assertInLoop()
        guard driver != nil, let connection else { return false }
        return connection.requestDrainNotification()
    }

    /// Holds reading (true) or lets it go on (false), as `WebSocketServerAdapter.holdReading`.
    public func holdReading(_ hold: Bool) {
        loop.assertInLoop()
        driver?.holdReading(hold)
    }

    /// Starts the close handshake; before the handshake finished, abandons the connection.
    public func close(_ code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        loop.assertInLoop()
        if let driver { driver.close(code, reason: reason) } else { connection?.close() }
    }

    // MARK: - ConnectionDelegate

    public func connectionIsReady(_ connection: TCPConnection) {
        var request = "GET \(url.target) HTTP/1.1\r\n"
        for (name, value) in handshake.requestHeaders(host: url.hostHeader) { request += "\(name): \(value)\r\n" }
        request += "\r\n"
        connection.write(Array(request.utf8))
    }

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        if let driver { return driver.received(bytes) }
        responseHead.append(contentsOf: bytes)
        guard let end = Self.headEnd(responseHead) else {
            if responseHead.count > Self.maxResponseHead { fail(.responseHeadTooLarge) }
            return
        }
        guard end <= Self.maxResponseHead else { return fail(.responseHeadTooLarge) }
        let (status, headers) = Self.parseHead(responseHead[0..<(end - 4)])
        let leftover = Array(responseHead[end...])
        responseHead = []
        guard status == 101 else { return fail(status == 0 ? .handshakeInvalid("malformed status line") : .refused(status: status)) }
        switch handshake.verify(status: status, headers: headers) {
        case .failure(let e): fail(.handshakeInvalid(e.description))
        case .success(let agreement): open(connection, agreement, leftover)
        }
    }

    public func connectionDidReadEOF(_ connection: TCPConnection) {
        if let driver { driver.readEOF() } else { fail(.closedDuringHandshake) }
    }

    public func connectionDidDrain(_ connection: TCPConnection) {
        driver?.drained()
        if driver != nil { handler?.webSocketDidDrain(self) }
    }

    public func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        cancelHandshakeTimer()
        if let driver { driver.transportDidClose() } else {
            fail(error.map { .connectFailed("\($0)") } ?? .closedDuringHandshake)
        }
        handler = nil
    }

    // MARK: - Handshake

    private func open(_ connection: TCPConnection, _ agreement: WebSocketClientHandshake.Agreement, _ leftover: [UInt8]) {
        cancelHandshakeTimer()
        let driver = WebSocketIODriver(
            connection: connection,
            ws: WebSocketConnection(role: .client, configuration: configuration, deflate: agreement.deflate, now: .now()),
            foreignBytes: connection.pendingOutputBytes)
        driver.onMessage = { [weak self] message in
            guard let self else { return }
            self.handler?.webSocket(self, didReceive: message)
        }
        driver.onClosed = { [weak self] code, reason in
            guard let self else { return }
            let h = self.handler
            self.handler = nil
            h?.webSocketDidClose(self, code: code, reason: reason)
        }
        self.driver = driver
        handler?.webSocketDidConnect(self, agreement: agreement)
        driver.received(leftover)
    }

    private func fail(_ error: WebSocketClientError) {
        cancelHandshakeTimer()
        let h = handler
        handler = nil
        if let connection, !connection.isClosed { connection.close() }
        h?.webSocket(self, didFailToConnect: error)
    }

    private func armHandshakeTimer() {
        handshakeTimer = loop.scheduleTimer(after: handshakeTimeout) { [weak self] in
            guard let self else { return }
            self.handshakeTimer = nil
            if self.driver == nil { self.fail(.handshakeTimedOut) }
        }
    }

    private func cancelHandshakeTimer() {
        if let t = handshakeTimer { loop.cancelTimer(t) }
        handshakeTimer = nil
    }

    static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for i in 0...(bytes.count - 4) where bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 {
            return i + 4
        }
        return nil
    }

    /// Status line and header fields of a response head (without the final CRLFCRLF). Lines
    /// without a colon are ignored; the handshake check looks only at the fields it needs.
    static func parseHead(_ head: ArraySlice<UInt8>) -> (status: Int, headers: [(name: String, value: String)]) {
        let lines = String(decoding: head, as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.1 ") || statusLine.hasPrefix("HTTP/1.0 ") else {
            return (0, [])
        }
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[1].count == 3, let status = Int(parts[1]) else { return (0, []) }
        let headers: [(name: String, value: String)] = lines.dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let value = line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
            return (String(line[..<colon]), String(value.reversed().drop { $0 == " " || $0 == "\t" }.reversed()))
        }
        return (status, headers)
    }
}
