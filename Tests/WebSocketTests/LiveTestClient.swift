// WebSocket client and raw-socket helpers for the tests that go through the real HTTP server
// (`WebSocketServerAdapterTests`). Every wait is bounded by a deadline, so a broken server fails a
// test instead of hanging it, and goes through `DescriptorWait`, so no wait holds one of the
// cooperative threads the in-process server's handlers need.
import BigPeerTestSupport
import Glibc
import HTTP
import Logging
import Sockets
@testable import WebSocket

struct LiveTestError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Starts an HTTP server on 127.0.0.1 (port 0) with `router`, runs `body(port)`, shuts down.
///
/// `body` — the client side — runs on a thread of its own (an `EventLoop` as its preferred task
/// executor), as a real peer runs in a process of its own: a client that must answer a Ping
/// within a short timeout can wait neither for a free cooperative thread (two here) nor for
/// other tests' clients (one shared client thread failed that way under load). Its waits are
/// asynchronous all the same (`DescriptorWait`). The thread stops when `body` returns, so `body`
/// must leave no unstructured `Task` behind (it would inherit the stopped executor).
func withWebSocketServer(
    _ router: HTTPRouter, threads: Int = 2, tls: HTTPServerConfiguration.TLS? = nil, _ body: (UInt16) async throws -> Void
) async throws {
    var config = HTTPServerConfiguration()
    config.tls = tls
    config.host = "127.0.0.1"
    config.port = 0
    config.threads = threads
    var logger = Logger(label: "test.ws")
    logger.logLevel = .critical
    let clientThread = try EventLoop()
    defer { clientThread.stop() }
    let server = try HTTPServer(configuration: config, router: router, logger: logger)
    try await server.start()
    do {
        try await withTaskExecutorPreference(clientThread) { try await body(UInt16(server.localPort ?? 0)) }
    } catch {
        await server.shutdown(deadline: .milliseconds(100))
        throw error
    }
    await server.shutdown(deadline: .milliseconds(500))
}

/// A TCP socket to 127.0.0.1 (blocking connect: on loopback the kernel answers within the call).
func connectLoopback(_ port: UInt16) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw LiveTestError("socket: errno \(errno)") }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else { let e = errno; close(fd); throw LiveTestError("connect: errno \(e)") }
    return fd
}

/// Sends all of `bytes`; throws if the peer closed or took nothing for 5 s.
func writeAll(_ fd: Int32, _ bytes: [UInt8]) async throws {
    guard try await DescriptorWait.sendAll(fd, bytes, stallTimeout: .seconds(5)) else {
        throw LiveTestError("write: errno \(errno) or stalled")
    }
}

/// Reads once, waiting at most `timeout`: nil on timeout, [] on EOF or error.
func readSome(_ fd: Int32, timeout: Duration) async throws -> [UInt8]? {
    switch try await DescriptorWait.receive(fd, timeout: max(timeout, .zero)) {
    case .data(let bytes): return bytes
    case .closed: return []
    case .timedOut: return nil
    }
}

/// Sends a raw request and returns the response head's status and lines (the body is ignored).
func rawHTTPStatus(_ port: UInt16, _ request: String) async throws -> (status: Int, head: String) {
    let fd = try connectLoopback(port)
    defer { close(fd) }
    try await writeAll(fd, Array(request.utf8))
    var got: [UInt8] = []
    let deadline = NanoTime.now().adding(.seconds(5))
    while !got.containsHeadEnd, NanoTime.now() < deadline {
        guard let chunk = try await readSome(fd, timeout: .seconds(1)) else { continue }
        if chunk.isEmpty { break }
        got += chunk
    }
    let head = String(decoding: got, as: UTF8.self)
    let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
    return (status, head)
}

func upgradeRequest(path: String = "/ws", extraHeaders: String = "", version: String = "13") -> String {
    "GET \(path) HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: \(version)\r\n\(extraHeaders)\r\n"
}

extension Array where Element == UInt8 {
    var containsHeadEnd: Bool { headEnd != nil }
    /// Index just past the first CRLFCRLF.
    var headEnd: Int? {
        guard count >= 4 else { return nil }
        for i in 0...(count - 4) where self[i] == 13 && self[i + 1] == 10 && self[i + 2] == 13 && self[i + 3] == 10 {
            return i + 4
        }
        return nil
    }
}

/// A WebSocket client over the sans-I/O connection in the client role; it reads and answers only
/// while the test awaits `receive` or `run` (inside `withWebSocketServer`, on the client thread).
final class LiveTestClient {
    let fd: Int32
    private(set) var ws: WebSocketConnection
    let agreement: WebSocketClientHandshake.Agreement
    private(set) var closeInfo: (code: WebSocketCloseCode, reason: String)?
    private(set) var transportClosed = false
    private var inbox: [WebSocketMessage] = []
    private var leftover: [UInt8]

    init(port: UInt16, path: String = "/ws", subprotocols: [String] = [], deflate: Bool = false) async throws {
        fd = try connectLoopback(port)
        let handshake = WebSocketClientHandshake(subprotocols: subprotocols,
                                                 deflate: deflate ? PerMessageDeflateConfiguration() : nil)
        var request = "GET \(path) HTTP/1.1\r\n"
        for (n, v) in handshake.requestHeaders(host: "127.0.0.1:\(port)") { request += "\(n): \(v)\r\n" }
        request += "\r\n"
        do {
            try await writeAll(fd, Array(request.utf8))
            var buffer: [UInt8] = []
            let deadline = NanoTime.now().adding(.seconds(5))
            while buffer.headEnd == nil {
                guard NanoTime.now() < deadline else { throw LiveTestError("handshake timed out") }
                guard let chunk = try await readSome(fd, timeout: .seconds(1)) else { continue }
                guard !chunk.isEmpty else { throw LiveTestError("closed during handshake") }
                buffer += chunk
            }
            let end = buffer.headEnd ?? 0
            let lines = String(decoding: buffer[0..<(end - 4)], as: UTF8.self).split(separator: "\r\n").map(String.init)
            let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
            let headers: [(name: String, value: String)] = lines.dropFirst().compactMap { line in
                guard let c = line.firstIndex(of: ":") else { return nil }
                return (String(line[..<c]), String(line[line.index(after: c)...].drop { $0 == " " }))
            }
            switch handshake.verify(status: status, headers: headers) {
            case .success(let a): agreement = a
            case .failure(let e): throw LiveTestError("handshake refused: \(e)")
            }
            leftover = Array(buffer[end...])
        } catch {
            close(fd)
            throw error
        }
        ws = WebSocketConnection(role: .client, configuration: .echo, deflate: agreement.deflate, now: .now())
    }

    deinit { close(fd) }

    func send(_ message: WebSocketMessage) async throws { try await apply(ws.send(message, now: .now())) }
    func closeWebSocket(_ code: WebSocketCloseCode = .normalClosure) async throws { try await apply(ws.close(code, now: .now())) }
    /// Writes bytes as they are (hand-made frames).
    func sendRaw(_ bytes: [UInt8]) async throws { try await writeAll(fd, bytes) }

    /// The next message within `timeout`, or nil (timeout or closed).
    func receive(timeout: Duration = .seconds(5)) async throws -> WebSocketMessage? {
        let deadline = NanoTime.now().adding(timeout)
        while inbox.isEmpty && !transportClosed && NanoTime.now() < deadline { try await pump(until: deadline) }
        return inbox.isEmpty ? nil : inbox.removeFirst()
    }

    /// Pumps (answering Pings) until the transport closes or `timeout` passes.
    func run(for timeout: Duration) async throws {
        let deadline = NanoTime.now().adding(timeout)
        while !transportClosed && NanoTime.now() < deadline { try await pump(until: deadline) }
    }

    private func pump(until deadline: NanoTime) async throws {
        if !leftover.isEmpty {
            let bytes = leftover
            leftover = []
            return try await feed(bytes)
        }
        let now = NanoTime.now()
        var wait = deadline > now ? deadline.duration(since: now) : .zero
        if let d = ws.nextDeadline { wait = min(wait, d > now ? d.duration(since: now) : .zero) }
        guard let bytes = try await readSome(fd, timeout: min(wait, .milliseconds(200))) else {
            return try await apply(ws.tick(now: .now()))
        }
        if bytes.isEmpty {
            transportClosed = true
            return try await apply(ws.transportClosed(now: .now()))
        }
        try await feed(bytes)
    }

    private func feed(_ bytes: [UInt8]) async throws {
        try await apply(ws.receive(bytes, now: .now()))
        while ws.hasBufferedInput && !transportClosed {
            let more = ws.receive([], now: .now())
            if more.isEmpty { break }
            try await apply(more)
        }
    }

    private func apply(_ actions: [WebSocketAction]) async throws {
        for action in actions {
            switch action {
            case .deliver(let m): inbox.append(m)
            case .write(let bytes):
                try await writeAll(fd, bytes)
                ws.didWrite(byteCount: bytes.count, now: .now())
            case .closed(let code, let reason): closeInfo = (code, reason)
            case .closeTransport:
                shutdown(fd, Int32(SHUT_WR))
            }
        }
    }
}
