import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Sockets
import Synchronization
import Testing

@Suite struct HTTPServerTests {
    @Test func keepAliveServesManyRequestsOnOneConnectionWithDateAndServer() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            for _ in 0..<3 {
                await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                let r = try #require(await c.readResponse())
                #expect(r.head.status.code == 200)
                #expect(r.text == "ok")
                #expect(r.head.headers["Content-Length"] == "2")
                #expect(r.head.headers["Server"] == "BigPeer")
                #expect(r.head.headers["Date"]?.hasSuffix(" GMT") == true)
                #expect(r.head.keepAlive)
            }
        }
    }

    @Test func pipelinedResponsesComeBackInRequestOrderEvenWhenTheFirstIsAsync() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\nGET /items/7 HTTP/1.1\r\nHost: t\r\n\r\nPOST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await c.readResponse()?.text == "slow")
            #expect(await c.readResponse()?.text == "item 7")
            #expect(await c.readResponse()?.text == "abc")
            #expect(await c.readResponse()?.text == "ok")
        }
    }

    @Test func http10ClosesUnlessKeepAliveIsAsked() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /healthz HTTP/1.0\r\n\r\n")
            let r = try #require(await c.readResponse())
            #expect(r.head.version == .http1_0)
            #expect(r.head.headers["Connection"] == "close")
            #expect(await c.isClosedByPeer())

            let k = try RawClient(port: port)
            await k.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            #expect(await k.readResponse()?.head.headers["Connection"] == "keep-alive")
            await k.send("GET /healthz HTTP/1.0\r\n\r\n")
            #expect(await k.readResponse()?.text == "ok")
        }
    }

    @Test func absoluteFormTargetsAndTrailingSlashesRoute() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET http://t/items/5?x=1 HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz/ HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await c.readResponse()?.text == "item 5")
            #expect(await c.readResponse()?.text == "ok")
        }
    }

    @Test func singleAcceptorSpreadsConnectionsOverLoops() async throws {
        try await withServer({ $0.acceptStrategy = .singleAcceptor; $0.threads = 2 }) { server, port in
            var clients: [RawClient] = []
            for _ in 0..<50 { clients.append(try RawClient(port: port)) }
            for c in clients { await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n") }
            var ok = 0
            for c in clients where await c.readResponse()?.text == "ok" { ok += 1 }
            #expect(ok == clients.count)
            #expect(server.connectionCount == 50)
        }
    }

    @Test func startFailsWithATypedErrorWhenThePortIsTaken() async throws {
        // A plain listener (no SO_REUSEPORT) holds the port, so the server's bind must fail.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(fd, 1)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        var config = HTTPServerConfiguration()
        config.host = "127.0.0.1"
        config.port = Int(UInt16(bigEndian: addr.sin_port))
        config.threads = 1
        let server = try HTTPServer(configuration: config, router: testRouter())
        await #expect(throws: IOError.self) { try await server.start() }
        await #expect(throws: HTTPServer.StartError.self) { try await server.start() }
    }

    @Test func servesOverIPv6() async throws {
        try await withServer({ $0.host = "::1" }) { _, port in
            let r = try await runProcess("/usr/bin/curl", ["-s", "http://[::1]:\(port)/healthz"])
            #expect(r.out == "ok")
        }
    }

    @Test func connectionCloseIsHonoured() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            #expect(await c.readResponse()?.head.headers["Connection"] == "close")
            #expect(await c.isClosedByPeer())
        }
    }

    @Test func headHasLengthButNoBody() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            let h = try #require(await c.readResponse(requestMethod: .HEAD))
            #expect(h.head.headers["Content-Length"] == "2")
            #expect(h.body.isEmpty)
            #expect(await c.readResponse()?.text == "ok")  // proves no stray body bytes were sent
        }
    }

    /// A request the parser refuses (here a body over the limit, announced in its head) is
    /// answered with the same JSON error as any other, request id included, then the connection closes.
    @Test func aRejectedRequestGetsTheJSONErrorWithARequestID() async throws {
        try await withServer({ $0.limits.maxBodyBytes = 10 }) { _, port in
            let c = try RawClient(port: port)
            await c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n")
            let r = try #require(await c.readResponse())
            #expect(r.head.status.code == 413)
            let text = r.text
            #expect(text.hasPrefix(#"{"error":{"description":"#) && text.contains(#""status":413"#), "\(text)")
            let id = text.components(separatedBy: #""requestId":""#).dropFirst().first?.split(separator: "\"").first
            #expect(id.map { $0.split(separator: "-").count == 3 } == true, "a made request id: \(text)")
            #expect(await c.isClosedByPeer())
        }
    }

    @Test func unknownRouteIs404JSONAndWrongMethodIs405WithAllow() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /nope HTTP/1.1\r\nHost: t\r\nX-Request-ID: abc-1\r\n\r\n")
            let nf = try #require(await c.readResponse())
            #expect(nf.head.status.code == 404)
            #expect(nf.head.headers["Content-Type"] == "application/json")
            #expect(nf.text == #"{"error":{"description":"no route for /nope","requestId":"abc-1","status":404}}"#)
            await c.send("DELETE /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            let na = try #require(await c.readResponse())
            #expect(na.head.status.code == 405)
            #expect(na.head.headers["Allow"] == "GET, HEAD")
            await c.send("GET /throws HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await c.readResponse()?.head.status.code == 403)
        }
    }

    @Test(arguments: [
        ("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("GET /healthz HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n", 400),
        ("\u{16}\u{03}\u{01}\u{02}\u{00}\u{01}\u{00}\u{01}\u{fc}\u{03}\u{03}garbage\r\n\r\n", 400),
        ("GET /healthz HTTP/3.0\r\nHost: t\r\n\r\n", 505),
        ("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n", 413),
    ])
    func badRequestsGetTheirStatusAndTheConnectionCloses(_ request: String, _ status: Int) async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send(request)
            let r = try #require(await c.readResponse())
            #expect(r.head.status.code == status)
            #expect(r.head.headers["Connection"] == "close")
            #expect(await c.isClosedByPeer())
            // The server is still fine.
            let ok = try RawClient(port: port)
            await ok.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await ok.readResponse()?.text == "ok")
        }
    }

    @Test func expectContinueGets100BeforeTheBody() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("PUT /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
            let interim = try #require(await c.readResponse())
            #expect(interim.head.status.code == 100)
            await c.send("data")
            #expect(await c.readResponse()?.text == "data")
        }
    }

    @Test func chunkedUploadIsReassembled() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n")
            #expect(await c.readResponse()?.text == "Wikipedia")
        }
    }

    @Test func streamedResponseIsChunkedAndKeepsTheConnection() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /stream?n=3 HTTP/1.1\r\nHost: t\r\n\r\n")
            let r = try #require(await c.readResponse())
            #expect(r.head.headers["Transfer-Encoding"] == "chunked")
            #expect(r.text == "data: 0\n\ndata: 1\n\ndata: 2\n\n")
            await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await c.readResponse()?.text == "ok")
        }
    }

    @Test func streamToHTTP10EndsWithCloseAndHeadOfAStreamHasNoBody() async throws {
        try await withServer { _, port in
            let old = try RawClient(port: port)
            await old.send("GET /stream?n=2 HTTP/1.0\r\n\r\n")
            let r = try #require(await old.readResponse())
            #expect(r.head.headers["Transfer-Encoding"] == nil)
            #expect(r.text == "data: 0\n\ndata: 1\n\n")
            #expect(await old.isClosedByPeer())
            let head = try RawClient(port: port)
            await head.send("HEAD /stream HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await head.readResponse(requestMethod: .HEAD)?.body.isEmpty == true)
            #expect(await head.readResponse()?.text == "ok")
        }
    }

    @Test func chunkedTrailersReachTheHandler() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            await c.send("POST /trailers HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-Checksum: 42\r\n\r\n")
            #expect(await c.readResponse()?.text == "X-Checksum=42")
        }
    }

    @Test func upgradeHandsTheConnectionAndBufferedBytesToTheNewProtocol() async throws {
        try await withServer { server, port in
            let c = try RawClient(port: port)
            await c.send("GET /upgrade HTTP/1.1\r\nHost: t\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nearly")
            var got = try #require(await c.readSome())
            let text = String(decoding: got, as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 101 Switching Protocols\r\n"))
            #expect(text.contains("Connection: Upgrade\r\n"))
            while !String(decoding: got, as: UTF8.self).hasSuffix("early") { got += try #require(await c.readSome()) }
            await c.send("later")
            #expect(await c.readSome().map { String(decoding: $0, as: UTF8.self) } == "later")
            #expect(server.connectionCount == 0)  // no longer counted as an HTTP connection
        }
    }

    /// Over a socket: a head that does not complete in time gets 408 and the connection closes.
    /// When the deadline falls (from the first byte, however the bytes trickle) is tested on a
    /// manual clock in `HTTPConnectionStateMachineTests`.
    @Test func slowlorisGets408AndIsClosed() async throws {
        try await withServer({ $0.timeouts.header = .milliseconds(300) }) { _, port in
            let c = try RawClient(port: port)
            await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n")
            // The 408 itself proves the 300 ms header timeout fired (the default is 10 s and the
            // client gives up after 5 s).
            let r = try #require(await c.readResponse())
            #expect(r.head.status.code == 408)
            #expect(await c.isClosedByPeer())
        }
    }

    @Test func bodyTimeoutAndIdleTimeoutCloseTheConnection() async throws {
        try await withServer({ $0.timeouts.body = .milliseconds(200); $0.timeouts.idle = .milliseconds(200) }) { server, port in
            let body = try RawClient(port: port)
            await body.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
            #expect(await body.readResponse()?.head.status.code == 408)
            let idle = try RawClient(port: port)
            await idle.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await idle.readResponse()?.text == "ok")
            #expect(await idle.isClosedByPeer())
            #expect(await eventually { server.connectionCount == 0 })
        }
    }

    @Test func clientDisconnectingMidBodyLeavesTheServerServing() async throws {
        try await withServer { server, port in
            for _ in 0..<20 {
                let c = try RawClient(port: port)
                await c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + String(repeating: "x", count: 5000))
            }
            let ok = try RawClient(port: port)
            await ok.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await ok.readResponse()?.text == "ok")
            #expect(await eventually { server.connectionCount == 1 })
        }
    }

    @Test func tenThousandSequentialRequestsOnOneConnection() async throws {
        try await withServer { _, port in
            let c = try RawClient(port: port)
            var ok = 0
            for i in 0..<10_000 {
                await c.send("GET /items/\(i) HTTP/1.1\r\nHost: t\r\n\r\n")
                if await c.readResponse()?.text == "item \(i)" { ok += 1 } else { break }
            }
            #expect(ok == 10_000)
        }
    }

    @Test func thousandConcurrentConnections() async throws {
        try await withServer { server, port in
            var clients: [RawClient] = []
            for _ in 0..<1000 { clients.append(try RawClient(port: port)) }
            for c in clients { await c.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n") }
            var ok = 0
            for c in clients where await c.readResponse()?.text == "ok" { ok += 1 }
            #expect(ok == 1000)
            #expect(server.connectionCount == 1000)
            clients.removeAll()
            #expect(await eventually { server.connectionCount == 0 })
        }
    }

    @Test func peerThatNeverReadsIsDroppedWhileOthersAreServed() async throws {
        try await withServer({ $0.timeouts.write = .milliseconds(400) }) { server, port in
            let stalled = try RawClient(port: port)
            await stalled.send("GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            let stalledBytes = try RawClient(port: port)
            await stalledBytes.send("GET /bigbytes HTTP/1.1\r\nHost: t\r\n\r\n")
            let stalledClosing = try RawClient(port: port)
            await stalledClosing.send("GET /bigbytes HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            try await Task.sleep(for: .milliseconds(100))
            let other = try RawClient(port: port)
            await other.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await other.readResponse()?.text == "ok")
            // Both stalled peers are dropped after the write timeout; their queues are freed.
            #expect(await eventually { server.connectionCount == 1 })
            #expect(await stalled.isClosedByPeer())
        }
    }

    @Test func connectionLimitRefusesExtraConnections() async throws {
        try await withServer({ $0.maxConnections = 2 }) { server, port in
            let a = try RawClient(port: port), b = try RawClient(port: port)
            await a.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            await b.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            let (ra, rb) = (await a.readResponse(), await b.readResponse())
            #expect(ra != nil && rb != nil)
            let c = try RawClient(port: port)
            #expect(await c.isClosedByPeer())
            #expect(server.connectionCount == 2)
        }
    }

    @Test func gracefulShutdownFinishesInFlightRequestsAndClosesIdleOnes() async throws {
        var config = HTTPServerConfiguration()
        config.host = "127.0.0.1"
        config.port = 0
        config.threads = 1
        let started = Atomic<Bool>(false), released = Atomic<Bool>(false)
        var router = testRouter()
        router.get("/gate", .respond { _ in
            started.store(true, ordering: .sequentiallyConsistent)
            while !released.load(ordering: .sequentiallyConsistent) { try await Task.sleep(for: .milliseconds(5)) }
            return .text("finished")
        })
        let server = try HTTPServer(configuration: config, router: router)
        try await server.start()
        let port = try #require(server.localPort)
        let idle = try RawClient(port: port)
        await idle.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(await idle.readResponse()?.text == "ok")
        let busy = try RawClient(port: port)
        await busy.send("GET /gate HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect(await eventually { started.load(ordering: .sequentiallyConsistent) })
        let shutdown = Task { await server.shutdown(deadline: .seconds(5)) }
        // Once draining, the listener is closed: new connections are refused.
        #expect(await eventually { (try? RawClient(port: port)) == nil })
        #expect(await idle.isClosedByPeer())
        released.store(true, ordering: .sequentiallyConsistent)
        let r = try #require(await busy.readResponse())
        #expect(r.text == "finished")
        #expect(r.head.headers["Connection"] == "close")
        #expect(await busy.isClosedByPeer())
        await shutdown.value
    }
}
