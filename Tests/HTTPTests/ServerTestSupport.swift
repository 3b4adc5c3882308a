import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Logging
import Sockets

/// Starts a server on 127.0.0.1 with an OS-assigned port, runs `body`, then shuts it down.
///
/// `body` stays on the cooperative pool (unlike `withWebSocketServer`'s): these clients have no
/// sub-second deadlines to meet, and some do a lot of work (10 000 round trips, megabytes
/// hashed), which on threads of their own would take CPU from the pool's two threads and so
/// from every other test. Their waits never hold a pool thread (`DescriptorWait`).
func withServer(
    _ configure: (inout HTTPServerConfiguration) -> Void = { _ in },
    router: HTTPRouter = testRouter(),
    _ body: (HTTPServer, Int) async throws -> Void
) async throws {
    var config = HTTPServerConfiguration()
    config.host = "127.0.0.1"
    config.port = 0
    config.threads = 2
    configure(&config)
    var logger = Logger(label: "test.http")
    logger.logLevel = .critical
    let server = try HTTPServer(configuration: config, router: router, logger: logger)
    try await server.start()
    do {
        try await body(server, server.localPort ?? 0)
    } catch {
        await server.shutdown(deadline: .milliseconds(100))
        throw error
    }
    await server.shutdown(deadline: .seconds(2))
}

/// The routes the integration tests use.
func testRouter() -> HTTPRouter {
    var r = HTTPRouter()
    r.get("/healthz", .immediate { _ in .text("ok") })
    r.get("/items/:id", .immediate { req in .text("item \(req.pathParameters["id"] ?? "?")") })
    r.post("/echo", .immediate { req in HTTPResponse(status: .ok, contentType: "application/octet-stream", body: req.body) })
    r.put("/echo", .immediate { req in HTTPResponse(status: .ok, contentType: "application/octet-stream", body: req.body) })
    r.get("/slow", .respond { _ in
        // Far longer than the 30 ms client timeout of HTTPClientTests, however late that client's
        // loop sees its timer on a loaded machine.
        try await Task.sleep(for: .seconds(1))
        return .text("slow")
    })
    r.post("/trailers", .immediate { req in .text(req.trailers.map { "\($0.name)=\($0.value)" }.joined(separator: ",")) })
    r.get("/redirect", .immediate { _ in HTTPResponse(status: .found, headers: ["Location": "/healthz"]) })
    r.get("/throws", .respond { _ in throw HTTPError(.forbidden, "nope") })
    r.get("/stream", .immediate { req in
        let count = Int(req.query?.split(separator: "=").last ?? "3") ?? 3
        return HTTPResponse(status: .ok, headers: ["Content-Type": "text/event-stream"], body: .stream { writer in
            for i in 0..<count { try await writer.write("data: \(i)\n\n") }
        })
    })
    r.get("/big", .immediate { _ in
        // 64 MiB streamed in 64 KiB pieces: only the high-water mark is ever buffered.
        HTTPResponse(status: .ok, body: .stream { writer in
            let piece = [UInt8](repeating: 0x61, count: 64 * 1024)
            for _ in 0..<1024 { try await writer.write(piece) }
        })
    })
    r.get("/bigbytes", .immediate { _ in HTTPResponse(status: .ok, contentType: "application/octet-stream", body: [UInt8](repeating: 0x62, count: 8 << 20)) })
    r.get("/upgrade", .sync { _ in
        .upgrade(HTTPResponse(status: .switchingProtocols, headers: ["Upgrade": "echo", "Connection": "Upgrade"]),
                 HTTPUpgrade { connection, buffered in
                     let echo = EchoDelegate()
                     connection.delegate = echo
                     if !buffered.isEmpty { connection.write(buffered) }
                 })
    })
    return r
}

/// After an upgrade: echoes every byte back (stands in for the WebSocket layer's delegate).
final class EchoDelegate: ConnectionDelegate {
    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) { connection.write(copying: bytes) }
    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {}
}

/// A test client over a plain socket; it reads responses with the module's own (separately
/// tested) response parser. Every wait goes through `DescriptorWait`: bounded by `timeout`, and
/// never holding a cooperative thread (the in-process server's async handlers need them).
final class RawClient {
    let fd: Int32
    /// How long one read waits for the next bytes, and one send for room to write.
    let timeout: Duration
    private var parser = HTTPParser(kind: .response)

    init(port: Int, timeoutSeconds: Int = 5) throws {
        // CLOEXEC: a child process another test spawns must not inherit (and keep open) our socket.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        // A blocking connect: on loopback the kernel answers (or refuses) within the call.
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        // Throw before `self.fd` is set: once every stored property is initialized, a throwing
        // init still runs deinit, whose close would be a second close of a number another test
        // (or a server's listener) may already have been given.
        if rc != 0 {
            let e = errno
            close(fd)
            throw IOError(call: "connect", errno: e)
        }
        self.fd = fd
        self.timeout = .seconds(timeoutSeconds)
    }

    deinit { close(fd) }

    func send(_ s: String) async { await send(Array(s.utf8)) }

    /// Sends everything; stops early (silently, like a failed write) when the server closed or
    /// took nothing for `timeout` — the test's next read then reports what happened.
    func send(_ bytes: [UInt8]) async {
        _ = try? await DescriptorWait.sendAll(fd, bytes, stallTimeout: timeout)
    }

    /// Reads whatever arrives next (nil on EOF, error or timeout).
    func readSome() async -> [UInt8]? {
        guard case .data(let bytes)? = try? await DescriptorWait.receive(fd, timeout: timeout) else { return nil }
        return bytes
    }

    struct Response {
        var head: HTTPResponseHead
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Reads one complete response; nil if the connection ended first.
    func readResponse(requestMethod: HTTPMethod = .GET) async -> Response? {
        parser.requestMethod = requestMethod
        var head: HTTPResponseHead?
        while true {
            do {
                switch try parser.next() {
                case .responseHead(let h): head = h
                case .end:
                    if let h = head { return Response(head: h, body: parser.takeBody()) }
                case .body: break
                case .needMoreData, .requestHead:
                    guard let more = await readSome() else {
                        if case .end? = try? parser.feedEOF(), let h = head { return Response(head: h, body: parser.takeBody()) }
                        return nil
                    }
                    parser.feed(more)
                }
            } catch {
                return nil
            }
        }
    }

    /// True if the server closed the connection (EOF or reset) with no read waiting longer than
    /// `timeout`; bytes still arriving before the end are skipped.
    func isClosedByPeer() async -> Bool {
        while true {
            switch try? await DescriptorWait.receive(fd, timeout: timeout) {
            case .data?: continue
            case .closed(let e)?: return e == 0 || e == ECONNRESET
            case .timedOut?, nil: return false
            }
        }
    }
}

/// Runs a program to completion; returns exit status and output (signal-safe: see TestCommand).
func runProcess(_ path: String, _ args: [String], stdin: [UInt8]? = nil) async throws -> (status: Int32, out: String, err: String) {
    let r = try await TestCommand.run(path, args, stdin: stdin)
    return (r.status, r.out, r.err)
}
