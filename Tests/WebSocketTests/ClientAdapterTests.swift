// The client-side adapter (`WebSocketClientAdapter`) on an event loop against our own server:
// ws:// and wss:// echo with and without deflate, refusals, the close handshake, URL parsing.
import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Sockets
import Testing
@testable import WebSocket

struct ClientLog: Sendable {
    var agreement: WebSocketClientHandshake.Agreement?
    var messages: [WebSocketMessage] = []
    var closed: UInt16?
    var failure: WebSocketClientError?
}

/// Sends `script` once connected (each message after the previous echo), then closes with 1000.
final class ScriptedClient: WebSocketClientHandler {
    let log: MutexBox<ClientLog>
    var script: [WebSocketMessage]
    init(log: MutexBox<ClientLog>, script: [WebSocketMessage]) { self.log = log; self.script = script }

    func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement) {
        log.withLock { $0.agreement = agreement }
        next(socket)
    }
    func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage) {
        log.withLock { $0.messages.append(message) }
        next(socket)
    }
    func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String) {
        log.withLock { $0.closed = code.rawValue }
    }
    func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError) {
        log.withLock { $0.failure = error }
    }
    private func next(_ socket: WebSocketClientAdapter) {
        if script.isEmpty { return socket.close() }
        try? socket.send(script.removeFirst())
    }
}

/// A self-signed certificate for localhost/127.0.0.1 (openssl CLI, temp folder).
func makeTestCertificate() async throws -> (directory: String, cert: String, key: String) {
    let dir = NSTemporaryDirectory() + "bigpeer-ws-tls-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
    let r = try await TestCommand.run("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                   "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost",
                   "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
    guard r.status == 0 else { throw LiveTestError("openssl req failed") }
    return (dir, dir + "/cert.pem", dir + "/key.pem")
}

func runClient(_ urlText: String, port: UInt16, deflate: Bool, tls: TLSContext? = nil,
               script: [WebSocketMessage]) async throws -> ClientLog {
    let group = try EventLoopGroup(threads: 1)
    defer { group.shutdown() }
    let loop = group.next()
    let log = MutexBox(ClientLog())
    let url = try #require(WebSocketURL(urlText))
    let address = try SocketAddress(ip: "127.0.0.1", port: Int(port))
    loop.execute {
        do throws(WebSocketClientError) {
            _ = try WebSocketClientAdapter.connect(
                url: url, address: address, loop: loop,
                handshake: WebSocketClientHandshake(subprotocols: ["bigpeer-sync.v1"],
                                                    deflate: deflate ? PerMessageDeflateConfiguration() : nil),
                configuration: .echo, tls: tls, handler: ScriptedClient(log: log, script: script))
        } catch {
            log.withLock { $0.failure = error }
        }
    }
    _ = await eventually { log.withLock { $0.closed != nil || $0.failure != nil } }  // the caller checks which
    return log.withLock { $0 }
}

@Suite("WebSocket client adapter")
struct WebSocketClientAdapterTests {
    static let script: [WebSocketMessage] = [
        .text("hello"), .binary([0, 1, 2, 255]), .text(String(repeating: "κόσμε ", count: 20_000)),
        .binary((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }), .text(""),
    ]

    @Test(arguments: [false, true])
    func ws_echoesThroughOurServer(deflate: Bool) async throws {
        let serverLog = MutexBox(HandlerLog())
        try await withWebSocketServer(recordingRouter(serverLog)) { port in
            let log = try await runClient("ws://127.0.0.1:\(port)/ws", port: port, deflate: deflate, script: Self.script)
            #expect(log.failure == nil)
            #expect(log.agreement?.subprotocol == "bigpeer-sync.v1")
            #expect((log.agreement?.deflate != nil) == deflate)
            #expect(log.messages == Self.script)
            #expect(log.closed == 1000)
            #expect(await eventually { serverLog.withLock { $0.closes == [1000] } })
        }
    }

    @Test func wss_echoesOverTLS_andChecksTheCertificate() async throws {
        let cert = try await makeTestCertificate()
        defer { try? FileManager.default.removeItem(atPath: cert.directory) }
        let serverLog = MutexBox(HandlerLog())
        try await withWebSocketServer(recordingRouter(serverLog), tls: .init(certificatePath: cert.cert, privateKeyPath: cert.key)) { port in
            let trusting = try TLSContext(clientWithAdditionalCAFile: cert.cert)
            let log = try await runClient("wss://localhost:\(port)/ws", port: port, deflate: true, tls: trusting, script: Self.script)
            #expect(log.failure == nil)
            #expect(log.messages == Self.script)
            #expect(log.closed == 1000)

            let untrusting = try TLSContext(clientWithAdditionalCAFile: nil)
            let refused = try await runClient("wss://localhost:\(port)/ws", port: port, deflate: false, tls: untrusting, script: [])
            guard case .connectFailed? = refused.failure else {
                Issue.record("an unknown CA must fail the connection, got \(String(describing: refused.failure))")
                return
            }
            #expect(refused.messages.isEmpty)
        }
    }

    @Test func refusedUpgrade_reportsTheStatus() async throws {
        try await withWebSocketServer(recordingRouter(MutexBox(HandlerLog()))) { port in
            let log = try await runClient("ws://127.0.0.1:\(port)/nowhere", port: port, deflate: false, script: [])
            #expect(log.failure == .refused(status: 404))
            #expect(log.closed == nil)
        }
    }

    @Test func urlParsing() {
        let plain = WebSocketURL("ws://example.com/api/v4/sync?x=1")
        #expect(plain?.secure == false && plain?.host == "example.com" && plain?.port == 80)
        #expect(plain?.target == "/api/v4/sync?x=1")
        #expect(plain?.hostHeader == "example.com")
        let secure = WebSocketURL("wss://[::1]:8443")
        #expect(secure?.host == "::1")
        #expect(secure?.port == 8443)
        #expect(secure?.target == "/")
        #expect(secure?.hostHeader == "[::1]:8443")
        #expect(WebSocketURL("wss://h?q")?.target == "/?q")
        for bad in ["http://h/", "ws://", "ws://h:0/", "ws://h:99999/", "ws://h/#frag", "ws://u@h/", "ws://[::1/"] {
            #expect(WebSocketURL(bad) == nil, "\(bad)")
        }
    }

    @Test func responseHeadParsing() {
        let head = Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade:  websocket \r\nbroken line\r\nConnection: Upgrade".utf8)
        let (status, headers) = WebSocketClientAdapter.parseHead(head[...])
        #expect(status == 101)
        #expect(headers.map(\.name) == ["Upgrade", "Connection"])
        #expect(headers.first?.value == "websocket")
        #expect(WebSocketClientAdapter.parseHead(Array("SSH-2.0-x".utf8)[...]).status == 0)
        #expect(WebSocketClientAdapter.parseHead(Array("HTTP/1.1 1010 x".utf8)[...]).status == 0)
    }
}
