// A blocking WebSocket client over the sans-I/O `WebSocketConnection` (client role), for the
// conformance and interop drivers in this package. One socket, poll() for deadlines, no threads.
// Test scaffolding: the product's client adapter will live in SmallPeer on the event loop.
import Glibc
import Sockets
import WebSocket

public enum BlockingClientError: Error, CustomStringConvertible {
    case connect(Int32)
    case handshake(String)
    case closed(WebSocketCloseCode, String)

    public var description: String {
        switch self {
        case .connect(let e): "connect failed: errno \(e)"
        case .handshake(let s): "handshake failed: \(s)"
        case .closed(let c, let r): "closed: \(c) \(r)"
        }
    }
}

public final class BlockingWebSocketClient {
    let fd: Int32
    public private(set) var ws: WebSocketConnection
    public let agreement: WebSocketClientHandshake.Agreement
    var inbox: [WebSocketMessage] = []
    public private(set) var closeInfo: (code: WebSocketCloseCode, reason: String)?
    var transportClosed = false
    var chunk = [UInt8](repeating: 0, count: 256 * 1024)

    /// Connects to `host:port` (IPv4 literal), sends the upgrade for `path`, verifies the answer.
    public init(host: String, port: UInt16, path: String, subprotocols: [String] = [], deflate: Bool = true) throws {
        let sock = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard sock >= 0 else { throw BlockingClientError.connect(errno) }
        var one: Int32 = 1
        setsockopt(sock, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &addr.sin_addr)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(sock, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { let e = errno; Glibc.close(sock); throw BlockingClientError.connect(e) }

        let handshake = WebSocketClientHandshake(subprotocols: subprotocols, deflate: deflate ? PerMessageDeflateConfiguration() : nil)
        var request = "GET \(path) HTTP/1.1\r\n"
        for (n, v) in handshake.requestHeaders(host: "\(host):\(port)") { request += "\(n): \(v)\r\n" }
        request += "\r\n"
        var buffer: [UInt8] = []
        var scratch = [UInt8](repeating: 0, count: 65536)
        var headEnd: Int?
        do {
            guard Self.writeAll(sock, Array(request.utf8)) else { throw BlockingClientError.handshake("write failed") }
            while headEnd == nil {
                let n = read(sock, &scratch, scratch.count)
                guard n > 0 else { throw BlockingClientError.handshake("connection closed during handshake") }
                let from = max(0, buffer.count - 3)
                buffer += scratch[0..<n]
                headEnd = (from..<max(from, buffer.count - 3)).first {
                    buffer[$0] == 13 && buffer[$0 + 1] == 10 && buffer[$0 + 2] == 13 && buffer[$0 + 3] == 10
                }
                if headEnd == nil && buffer.count > 16384 { throw BlockingClientError.handshake("response head too large") }
            }
        } catch {
            Glibc.close(sock)
            throw error
        }
        let end = headEnd ?? 0
        let head = String(decoding: buffer[0..<end], as: UTF8.self).split(separator: "\r\n").map(String.init)
        let status = head.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        let headers: [(name: String, value: String)] = head.dropFirst().compactMap { line in
            guard let c = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<c]), String(line[line.index(after: c)...].drop { $0 == " " }))
        }
        switch handshake.verify(status: status, headers: headers) {
        case .success(let a): agreement = a
        case .failure(let e): Glibc.close(sock); throw BlockingClientError.handshake(e.description)
        }
        fd = sock
        ws = WebSocketConnection(role: .client, configuration: .echo, deflate: agreement.deflate, now: .now())
        // Frames that came with the response wait for the first pump, so a message handler
        // set after init sees them in order with everything that follows.
        leftover = Array(buffer[(end + 4)...])
    }

    private var leftover: [UInt8] = []

    deinit { Glibc.close(fd) }

    /// Whether the transport is gone (closed by either side).
    public var isFinished: Bool { transportClosed }

    public func send(_ message: WebSocketMessage) throws {
        apply(try ws.send(message, now: .now()))
    }

    public func ping(_ payload: [UInt8]) throws {
        apply(try ws.ping(payload, now: .now()))
    }

    public func close(_ code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        apply(ws.close(code, reason: reason, now: .now()))
    }

    /// The next message, or nil once the connection is finished.
    public func receive() -> WebSocketMessage? {
        while inbox.isEmpty && !transportClosed { pump() }
        return inbox.isEmpty ? nil : inbox.removeFirst()
    }

    /// Runs until the transport is closed (after a close handshake or a failure).
    public func runUntilFinished() {
        while !transportClosed { pump() }
    }

    /// Handler for messages as they arrive (the Autobahn driver echoes them here).
    public var onMessage: ((WebSocketMessage, BlockingWebSocketClient) -> Void)?

    private func pump() {
        if !leftover.isEmpty {
            let bytes = leftover
            leftover = []
            feed(bytes)
            return
        }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let now = NanoTime.now()
        var timeout: Int32 = 60_000
        if let d = ws.nextDeadline {
            timeout = d > now ? Int32(min(60_000, d.duration(since: now).components.seconds * 1000 + 1)) : 0
        }
        if poll(&pfd, 1, timeout) == 0 {
            apply(ws.tick(now: .now()))
            return
        }
        let n = read(fd, &chunk, chunk.count)
        if n <= 0 {
            apply(ws.transportClosed(now: .now()))
            transportClosed = true
            return
        }
        feed(Array(chunk[0..<n]))
    }

    private func feed(_ bytes: [UInt8]) {
        apply(ws.receive(bytes, now: .now()))
        while ws.hasBufferedInput && !transportClosed {
            let more = ws.receive([], now: .now())
            if more.isEmpty { break }
            apply(more)
        }
    }

    private func apply(_ actions: [WebSocketAction]) {
        for action in actions {
            switch action {
            case .deliver(let m):
                if let onMessage { onMessage(m, self) } else { inbox.append(m) }
            case .write(let bytes):
                if Self.writeAll(fd, bytes) { ws.didWrite(byteCount: bytes.count, now: .now()) } else { transportClosed = true }
            case .closed(let code, let reason):
                closeInfo = (code, reason)
            case .closeTransport:
                shutdown(fd, Int32(SHUT_RDWR))
                transportClosed = true
            }
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n <= 0 { return false }
            offset += n
        }
        return true
    }
}
