import BigPeerTestSupport
import HTTP
import Testing

/// `HTTPServerConfiguration.maxBufferedRequestBytes`: request content read whole before its
/// handler runs is held in memory, so the server bounds what all connections hold at once. The
/// content is charged as it arrives (a declared length costs nothing until it is sent); a request
/// whose content would go past the budget gets 503 with `Retry-After` and its connection closes;
/// what a request held comes back when its handler is done or its connection closes. Before,
/// each of up to 10,000 connections could hold a body of `maxBodyBytes` at once.
@Suite struct RequestMemoryBudgetTests {
    static let limit = 1 << 20

    static func withBudgetedServer(_ body: (HTTPServer, Int) async throws -> Void) async throws {
        try await withServer({
            $0.limits.maxBodyBytes = Self.limit
            $0.maxBufferedRequestBytes = Self.limit
        }) { server, port in try await body(server, port) }
    }

    static func post(_ c: RawClient, length: Int, sending: Int? = nil) async {
        await c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(length)\r\n\r\n")
        await c.send([UInt8](repeating: 0x61, count: sending ?? length))
    }

    /// One connection holds 800 KiB (one byte short of its declared length); a second request's
    /// 400 KiB would go past 1 MiB: 503, and its connection closes, giving back what it had.
    /// Once the first is answered, the same request goes through.
    @Test func contentPastTheBudget_gets503_andGoesThroughOnceItIsBack() async throws {
        try await Self.withBudgetedServer { server, port in
            let holder = try RawClient(port: port, timeoutSeconds: 30)
            await Self.post(holder, length: 800 << 10, sending: (800 << 10) - 1)
            #expect(await eventually { server.bufferedRequestBytes == (800 << 10) - 1 })

            let refused = try RawClient(port: port, timeoutSeconds: 30)
            await Self.post(refused, length: 300 << 10)
            let answer = await refused.readResponse()
            #expect(answer?.head.status.code == 503)
            #expect(answer?.head.headers["Retry-After"] == "1")
            #expect(answer?.text.contains("request content") == true, "\(answer?.text ?? "")")
            #expect(await refused.isClosedByPeer())
            #expect(server.requestsRefusedForMemory == 1)
            #expect(await eventually { server.bufferedRequestBytes == (800 << 10) - 1 }, "the refused request gave back what it had")

            // A request without content is not refused meanwhile.
            let plain = try RawClient(port: port, timeoutSeconds: 30)
            await plain.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            #expect(await plain.readResponse()?.head.status.code == 200)

            await holder.send([0x61])
            let echoed = await holder.readResponse()
            #expect(echoed?.head.status.code == 200 && echoed?.body.count == 800 << 10)
            #expect(server.bufferedRequestBytes == 0, "given back when answered")

            let again = try RawClient(port: port, timeoutSeconds: 30)
            await Self.post(again, length: 300 << 10)
            #expect(await again.readResponse()?.body.count == 300 << 10)
            #expect(server.bufferedRequestBytes == 0)
        }
    }

    /// Heads that declare large bodies and send nothing hold nothing: 40 of them declaring the
    /// whole budget each do not keep another client's request out.
    @Test func declaredLengthsAlone_holdNothing() async throws {
        try await Self.withBudgetedServer { server, port in
            var idle: [RawClient] = []
            for _ in 0..<40 {
                let c = try RawClient(port: port, timeoutSeconds: 30)
                await c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(Self.limit)\r\n\r\n")
                idle.append(c)
            }
            let chunked = try RawClient(port: port, timeoutSeconds: 30)
            await chunked.send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            #expect(await eventually { server.bufferedRequestBytes == 5 }, "a chunked request holds what it sent")
            let other = try RawClient(port: port, timeoutSeconds: 30)
            await Self.post(other, length: 600 << 10)
            #expect(await other.readResponse()?.body.count == 600 << 10)
            await chunked.send("0\r\n\r\n")
            #expect(await chunked.readResponse()?.text == "hello")
            #expect(server.bufferedRequestBytes == 0)
            #expect(server.requestsRefusedForMemory == 0)
            _ = idle
        }
    }

    /// A client that sends part of a body and goes away gives its share back.
    @Test func whatADroppedRequestHeld_comesBack() async throws {
        try await Self.withBudgetedServer { server, port in
            do {
                let leaver = try RawClient(port: port, timeoutSeconds: 30)
                await Self.post(leaver, length: 900 << 10, sending: 100 << 10)
                #expect(await eventually { server.bufferedRequestBytes == 100 << 10 })
            }  // closed here
            #expect(await eventually { server.bufferedRequestBytes == 0 }, "\(server.bufferedRequestBytes)")
        }
    }

    /// Pipelined and keep-alive requests hold and give back one after another.
    @Test func keepAliveRequests_holdOneAtATime() async throws {
        try await Self.withBudgetedServer { server, port in
            let c = try RawClient(port: port, timeoutSeconds: 30)
            let head = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: \(700 << 10)\r\n\r\n"
            let content = String(repeating: "b", count: 700 << 10)
            await c.send(head + content + head + content)  // 1.4 MiB in flight, 700 KiB held at a time
            for _ in 0..<2 { #expect(await c.readResponse()?.body.count == 700 << 10) }
            #expect(server.bufferedRequestBytes == 0)
            #expect(server.requestsRefusedForMemory == 0)
        }
    }
}
