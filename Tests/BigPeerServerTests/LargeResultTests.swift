import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Postgres
import Sockets
import Testing
import Values

/// Results larger than the output queue's old drop limit (16 MiB), over real HTTP from a real
/// server on a real database (docs/API.md, "Large results").
@Suite struct LargeResultTests {
    /// About 20 MB of JSON: every document is ~330 bytes.
    static let documentCount = 60_000

    /// Fills collection `big` with one SQL statement (the read path reads only `value`; the CRDT
    /// state is a placeholder no test here touches).
    static func fill(_ db: TestDatabase, count: Int = documentCount) async throws {
        let conn = try await db.connect()
        _ = try await conn.query(PostgresQuery(unsafeSQL: """
            INSERT INTO documents (collection, id, value, state)
            SELECT 'big', to_jsonb('d' || lpad(g::text, 6, '0')),
                   jsonb_build_object('_id', 'd' || lpad(g::text, 6, '0'), 'n', g, 'pad', repeat('x', 300)), '\\x00'::bytea
            FROM generate_series(1, \(count)) g
            """))
        await conn.close()
    }

    static let selectAll = Array(#"{"statement":"SELECT * FROM big"}"#.utf8)

    /// A streamed CBOR response: its items array has indefinite length (not deterministic encoding).
    static let streamedCBOR = CBORLimits(maxInputBytes: 64 << 20, requireCanonical: false)

    /// A server (`--insecure-dev`, changed by `configure`) on a database whose `big` holds `count` documents.
    static func withFilledServer(count: Int = documentCount, http: HTTPClient.Configuration = HTTPClient.Configuration(),
                                 _ configure: (inout ServerConfiguration) -> Void = { _ in },
                                 _ body: (InProcessServer) async throws -> Void) async throws {
        try await InProcessServer.with(http: http, { config in
            config.insecureDevelopment = true
            configure(&config)
        }) { server in
            try await fill(server.database, count: count)
            try await body(server)
        }
    }

    /// A reader with a 32 KiB receive buffer that has asked for the whole of `big` and read the
    /// first 32 KiB of the answer (the stream then waits for it).
    static func stalledReader(_ port: Int) throws -> (RawHTTPSocket, received: [UInt8]) {
        let socket = try RawHTTPSocket(port: port, receiveBuffer: 32 << 10)
        do {
            try socket.send(request(selectAll))
            return (socket, try socket.read(upTo: 32 << 10))
        } catch {
            socket.close()
            throw error
        }
    }

    @Test func aResultLargerThan16MiBArrivesWholeAndParses() async throws {
        var cc = HTTPClient.Configuration()
        cc.maxResponseBytes = 64 << 20
        cc.requestTimeout = .seconds(120)
        try await Self.withFilledServer(http: cc) { server in
            let (service, client) = (server.service, server.http)
            let r = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/execute",
                                                               headers: ["Content-Type": "application/json"], body: Self.selectAll))
            #expect(r.status.code == 200)
            #expect(r.body.count > 16 << 20)
            var limits = JSONLimits()
            limits.maxInputBytes = r.body.count
            let v = try JSON.parse(r.body, limits: limits)
            guard case .array(let items)? = v["items"] else { Issue.record("no items"); return }
            #expect(items.count == Self.documentCount)
            #expect(Set(items.compactMap { $0["_id"]?.stringValue }).count == Self.documentCount)
            #expect(v["queryType"] == "select")
            #expect(v["transactionId"] == 0)
            #expect(v["mutatedDocumentIds"] == [])
            #expect(v["warnings"] == [])
            #expect(v["totalWarningsCount"] == 0)

            // The legacy /find streams the same way.
            let find = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/find",
                                                                  headers: ["Content-Type": "application/json"],
                                                                  body: Array(#"{"collection":"big"}"#.utf8)))
            #expect(find.status.code == 200)
            limits.maxInputBytes = find.body.count
            let fv = try JSON.parse(find.body, limits: limits)
            guard case .array(let documents)? = fv["documents"] else { Issue.record("no documents"); return }
            #expect(documents.count == Self.documentCount)
            #expect(documents.first?["id"] != nil && documents.first?["fields"]?["pad"] != nil)
            #expect(fv["txnId"] == 0)

            // A streamed result with OFFSET and LIMIT past the probe, and a residual filter.
            let paged = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/execute",
                headers: ["Content-Type": "application/json"],
                body: Array(#"{"statement":"SELECT n FROM big WHERE n % 2 = 0 LIMIT 1000 OFFSET 10"}"#.utf8)))
            #expect(paged.status.code == 200)
            guard case .array(let rows)? = try JSON.parse(paged.body)["items"] else { Issue.record("no items"); return }
            #expect(rows.count == 1000)
            #expect(Set(rows.compactMap { $0["n"]?.int64Value }).count == 1000)
            #expect(rows.allSatisfy { ($0["n"]?.int64Value ?? 1) % 2 == 0 })
        }
    }

    /// A reader that takes a little at a time: the server's queue for it stays near the
    /// connection's high-water mark (256 KiB) plus one chunk, not the 20 MB result.
    @Test func aSlowReaderHoldsABoundedQueueNotTheResult() async throws {
        try await Self.withFilledServer { server in
            let service = server.service
            let (socket, head) = try Self.stalledReader(service.port)
            defer { socket.close() }
            var received = head
            // Stop reading until the server's queue for us has passed the high-water mark
            // (256 KiB): the kernel buffers are full and the stream had to wait for this reader.
            let highWaterMark = WriteLimits().highWaterMark
            #expect(await eventually(within: .seconds(30)) { service.http.peakQueuedOutputBytes > highWaterMark },
                    "the reader never held the stream back")
            for _ in 0..<20 {  // then a little at a time, with pauses
                received += try socket.read(upTo: 32 << 10)
                try await Task.sleep(for: .milliseconds(5))
            }
            let midway = service.http.peakQueuedOutputBytes
            received += try socket.readToEnd(limit: 64 << 20)
            let body = try #require(RawHTTPSocket.chunkedBody(of: received))
            var limits = JSONLimits()
            limits.maxInputBytes = body.count
            guard case .array(let items)? = try JSON.parse(body, limits: limits)["items"] else { Issue.record("no items"); return }
            #expect(items.count == Self.documentCount)
            #expect(body.count > 16 << 20)
            // 256 KiB high-water mark + one 64 KiB chunk (+ its framing); the unfixed server queued the whole body.
            #expect(midway <= 1 << 20, "peak queued bytes \(midway) while the reader was slow")
            #expect(service.http.peakQueuedOutputBytes <= 1 << 20, "peak queued bytes \(service.http.peakQueuedOutputBytes)")
        }
    }

    /// The database session dies while the body is being sent (the status line already said 200):
    /// the connection closes without the last chunk, so the client sees a truncated response.
    @Test func anErrorMidStreamTruncatesTheResponse() async throws {
        try await Self.withFilledServer { server in
            let (service, client) = (server.service, server.http)
            let (socket, head) = try Self.stalledReader(service.port)
            defer { socket.close() }
            var received = head
            #expect(String(decoding: received.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK")
            // The stream is stalled on this reader; its session waits between FETCHes.
            let observer = try await server.database.connect()
            var pid: Int32?
            _ = try await eventually {
                let rows = try await observer.query("""
                    SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND state LIKE 'idle in transaction%' AND query LIKE 'FETCH%'
                    """)
                pid = rows.first.flatMap { try? $0.decode(0, as: Int32.self) }
                return pid != nil
            }
            let backend = try #require(pid)
            _ = try await observer.query(PostgresQuery(unsafeSQL: "SELECT pg_terminate_backend(\(backend))"))
            await observer.close()
            received += try socket.readToEnd(limit: 64 << 20)
            #expect(received.count < 16 << 20)
            #expect(!received.suffix(5).elementsEqual(Array("0\r\n\r\n".utf8)))
            #expect(RawHTTPSocket.chunkedBody(of: received) == nil)  // no complete chunked message

            // The server goes on serving (the broken session was replaced).
            let r = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/execute",
                headers: ["Content-Type": "application/json"], body: Array(#"{"statement":"SELECT * FROM big WHERE _id = 'd000007'"}"#.utf8)))
            #expect(r.status.code == 200)
            #expect(try JSON.parse(r.body)["items"]?.arrayValue?.first?["n"] == 7)
        }
    }

    /// Sorting in memory is bounded: past the budget, a 400 that says what to do, not unbounded memory.
    @Test func anInMemorySortPastTheBudgetIs400() async throws {
        try await Self.withFilledServer(count: 5_000, { $0.maxBufferedResultBytes = 1 << 20 }) { server in  // ~1.7 MB
            let (service, client) = (server.service, server.http)
            let url = "http://127.0.0.1:\(service.port)/api/v4/store/execute"
            func post(_ statement: String, accept: String = "application/json") async throws -> HTTPClientResponse {
                try await client.execute(HTTPClientRequest(method: .POST, url: url, headers: ["Content-Type": "application/json", "Accept": accept],
                                                           body: JSON.serialize(.object(["statement": .string(statement)]))))
            }
            for statement in ["SELECT * FROM big ORDER BY pad", "SELECT DISTINCT pad, n FROM big", "SELECT n, COUNT(*) AS c FROM big GROUP BY n"] {
                let r = try await post(statement)
                #expect(r.status.code == 400, "\(statement)")
                #expect(try JSON.parse(r.body)["error"]?["description"]?.stringValue?.contains("result too large") == true, "\(statement)")
            }
            // A read with no in-memory stage streams past the budget, in JSON and in CBOR alike.
            let streamed = try await post("SELECT * FROM big")
            #expect(streamed.status.code == 200)
            let json = try JSON.parse(streamed.body)
            #expect(json["items"]?.arrayValue?.count == 5_000)
            let cbor = try await post("SELECT * FROM big", accept: "application/cbor")
            #expect(cbor.status.code == 200 && cbor.headers["Content-Type"] == "application/cbor")
            #expect(cbor.headers["Transfer-Encoding"] == "chunked")
            #expect(try CBORValueCodec.decode(cbor.body, limits: Self.streamedCBOR) == json, "the same object as the JSON")
            for accept in ["application/json", "application/cbor"] {
                let find = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/store/find",
                    headers: ["Content-Type": "application/json", "Accept": accept], body: Array(#"{"collection":"big"}"#.utf8)))
                #expect(find.status.code == 200 && find.headers["Transfer-Encoding"] == "chunked", "\(accept)")
                let found = accept == "application/json" ? try JSON.parse(find.body) : try CBORValueCodec.decode(find.body, limits: Self.streamedCBOR)
                #expect(found["documents"]?.arrayValue?.count == 5_000 && found["txnId"] == json["transactionId"], "\(accept)")
            }
            // A LIMIT kept out of the SQL by a residual WHERE, reached within the probe's rows
            // (a fresh table is scanned in insertion order): answered from the probe, not streamed.
            let residual = try await post("SELECT n FROM big WHERE n % 2 = 0 LIMIT 10")
            #expect(residual.status.code == 200)
            #expect(residual.headers["Content-Length"] != nil)
            let evens = try JSON.parse(residual.body)["items"]?.arrayValue ?? []
            #expect(evens.count == 10 && evens.allSatisfy { ($0["n"]?.int64Value ?? 1) % 2 == 0 })
            // A pushed-down ORDER BY with LIMIT holds only the limit.
            let top = try await post("SELECT n FROM big ORDER BY n DESC LIMIT 3")
            #expect(try JSON.parse(top.body)["items"] == [["n": 5000], ["n": 4999], ["n": 4998]])
        }
    }

    /// Each stream holds a database session while its client reads: past the cap, 503 + Retry-After
    /// (the rest of the pool stays free for everything else); the slot comes back when the reader leaves.
    @Test func streamsPastTheCapAre503AndTheSlotComesBack() async throws {
        // ~6.6 MB: more than the kernel buffers take for a stalled reader.
        try await Self.withFilledServer(count: 20_000, { $0.maxConcurrentStreamedResults = 1 }) { server in
            let (service, client) = (server.service, server.http)
            let (stalled, head) = try Self.stalledReader(service.port)
            #expect(String(decoding: head.prefix(15), as: UTF8.self) == "HTTP/1.1 200 OK")
            let url = "http://127.0.0.1:\(service.port)/api/v4/store/execute"
            // 5,000 documents of ~330 bytes: more than the second probe takes (a 512 KiB batch), so a stream.
            func selectAll() async throws -> HTTPClientResponse {
                try await client.execute(HTTPClientRequest(method: .POST, url: url, headers: ["Content-Type": "application/json"],
                                                           body: Array(#"{"statement":"SELECT * FROM big LIMIT 5000"}"#.utf8)))
            }
            let refused = try await selectAll()
            #expect(refused.status.code == 503)
            #expect(refused.headers["Retry-After"] != nil)
            #expect(try JSON.parse(refused.body)["error"]?["description"]?.stringValue?.contains("retry later") == true)
            // Small reads are not streams and are not limited.
            let small = try await client.execute(HTTPClientRequest(method: .POST, url: url, headers: ["Content-Type": "application/json"],
                                                                   body: Array(#"{"statement":"SELECT * FROM big LIMIT 5"}"#.utf8)))
            #expect(small.status.code == 200)
            stalled.close()
            #expect(try await eventually { try await selectAll().status.code == 200 }, "the slot came back")
        }
    }

    static func request(_ body: [UInt8]) -> [UInt8] {
        Array("POST /api/v4/store/execute HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body
    }
}

/// A blocking client socket for tests that control exactly how fast a response is read.
final class RawHTTPSocket {
    let fd: Int32

    init(port: Int, receiveBuffer: Int32) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        // Small, so the kernel cannot absorb the response for the slow reader (set before connect).
        var size = receiveBuffer
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var timeout = timeval(tv_sec: 30, tv_usec: 0)  // a hung server fails the test instead of hanging it
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard rc == 0 else { Glibc.close(fd); throw RawSocketError(what: "connect", errno: errno) }
    }

    struct RawSocketError: Error { let what: String; let errno: Int32 }

    func send(_ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw RawSocketError(what: "send", errno: errno) }
            off += n
        }
    }

    /// One `recv` of at most `max` bytes (empty at EOF).
    func read(upTo max: Int) throws -> [UInt8] {
        var buf = [UInt8](repeating: 0, count: max)
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, max, 0) }
        guard n >= 0 else { throw RawSocketError(what: "recv", errno: errno) }
        return Array(buf[0..<n])
    }

    func readToEnd(limit: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        while out.count < limit {
            let piece = try read(upTo: 256 << 10)
            if piece.isEmpty { break }
            out += piece
        }
        return out
    }

    func close() { Glibc.close(fd) }

    /// The body of a complete chunked HTTP/1.1 response, or nil if the message is incomplete.
    static func chunkedBody(of response: [UInt8]) -> [UInt8]? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let headEnd = response.firstRange(of: separator)?.upperBound else { return nil }
        let head = String(decoding: response[..<headEnd], as: UTF8.self).lowercased()
        guard head.contains("transfer-encoding: chunked") else { return nil }
        var body: [UInt8] = []
        var i = headEnd
        while true {
            guard let lineEnd = response[i...].firstRange(of: Array("\r\n".utf8)) else { return nil }
            guard let size = Int(String(decoding: response[i..<lineEnd.lowerBound], as: UTF8.self), radix: 16) else { return nil }
            i = lineEnd.upperBound
            if size == 0 { return response[i...].starts(with: Array("\r\n".utf8)) ? body : nil }
            guard response.count >= i + size + 2 else { return nil }
            body += response[i..<(i + size)]
            i += size + 2
        }
    }
}
