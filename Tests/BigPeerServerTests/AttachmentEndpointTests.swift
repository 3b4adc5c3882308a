@testable import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import Glibc
import HTTP
import Postgres
import Testing
import Values

/// `POST /api/v4/attachments/upload` and `GET /api/v4/attachments/{id}` over real HTTP against a
/// real PostgreSQL.
@Suite struct AttachmentEndpointTests {
    static func withService(maxAttachmentBytes: Int = 64 << 20, _ body: (BigPeerService, HTTPClient, TestDatabase) async throws -> Void) async throws {
        try await InProcessServer.with({ config in
            config.insecureDevelopment = true  // auth on these routes is tested in AuthTests
            config.maxAttachmentBytes = maxAttachmentBytes
        }) { server in
            try await body(server.service, server.http, server.database)
        }
    }

    static func payload(_ n: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<n).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
    }

    static func multipart(_ content: [UInt8], boundary: String = "----bp-test-boundary", contentType: String = "application/octet-stream") -> [UInt8] {
        Array(("--\(boundary)\r\nContent-Disposition: form-data; name=\"comment\"\r\n\r\nhello\r\n"
               + "--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.bin\"\r\nContent-Type: \(contentType)\r\n\r\n").utf8)
            + content + Array("\r\n--\(boundary)--\r\n".utf8)
    }

    static func upload(_ client: HTTPClient, _ port: Int, _ content: [UInt8], contentType: String = "application/octet-stream") async throws -> HTTPClientResponse {
        try await client.execute(HTTPClientRequest(
            method: .POST, url: "http://127.0.0.1:\(port)/api/v4/attachments/upload",
            headers: ["Content-Type": "multipart/form-data; boundary=----bp-test-boundary"],
            body: multipart(content, contentType: contentType)))
    }

    static func sha256Hex(_ bytes: [UInt8]) async throws -> String {
        let path = NSTemporaryDirectory() + "bp-sha-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let r = try await TestCommand.run("/usr/bin/sha256sum", [path])
        return String(r.out.prefix(64))
    }

    static func count(_ db: TestDatabase, _ table: String) async throws -> Int64 {
        let conn = try await db.connect()
        defer { Task { await conn.close() } }
        return try await conn.query(PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table)"))[0].decode(0, as: Int64.self)
    }

    @Test func curlUploadThenDownloadAndIdenticalContentIsStoredOnce() async throws {
        try await Self.withService { service, client, db in
            let content = Self.payload(2_500_000, seed: 1)  // 3 chunks of 1 MiB
            let path = NSTemporaryDirectory() + "bp-upload-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).bin"
            try Data(content).write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let curl = try await TestCommand.run("/usr/bin/curl", ["-sS", "-F", "file=@\(path);type=image/png", "http://127.0.0.1:\(service.port)/api/v4/attachments/upload"])
            #expect(curl.status == 0)
            let answer = try JSON.parse(Array(curl.out.utf8))
            let expectedID = try await Self.sha256Hex(content)
            #expect(answer == .object(["id": .string(expectedID), "len": .int(2_500_000)]))

            let download = try await client.get("http://127.0.0.1:\(service.port)/api/v4/attachments/\(expectedID)")
            #expect(download.status.code == 200)
            #expect(download.body == content)
            #expect(download.headers["Content-Length"] == "2500000")
            #expect(download.headers["Content-Type"] == "image/png")
            #expect(download.headers["ETag"] == "\"\(expectedID)\"")
            #expect(download.headers["Accept-Ranges"] == "bytes")

            // The same bytes again (through a different client and form): same id, nothing new stored.
            let again = try await Self.upload(client, service.port, content)
            #expect(again.status.code == 200)
            #expect(try JSON.parse(again.body) == answer)
            #expect(try await Self.count(db, "bigpeer_attachments") == 1)
            #expect(try await Self.count(db, "bigpeer_attachment_chunks") == 3)

            // Empty content is an attachment too.
            let empty = try await Self.upload(client, service.port, [])
            #expect(try JSON.parse(empty.body)["len"] == 0)
            let emptyID = try #require(try JSON.parse(empty.body)["id"]?.stringValue)
            #expect(emptyID == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            let emptyGet = try await client.get("http://127.0.0.1:\(service.port)/api/v4/attachments/\(emptyID)")
            #expect(emptyGet.status.code == 200)
            #expect(emptyGet.body.isEmpty)
        }
    }

    @Test func rangesETagsAndErrors() async throws {
        try await Self.withService { service, client, _ in
            let content = Self.payload(1_200_000, seed: 2)
            let up = try await Self.upload(client, service.port, content)
            let id = try #require(try JSON.parse(up.body)["id"]?.stringValue)
            let url = "http://127.0.0.1:\(service.port)/api/v4/attachments/\(id)"
            func get(_ headers: HTTPHeaders) async throws -> HTTPClientResponse {
                try await client.execute(HTTPClientRequest(method: .GET, url: url, headers: headers))
            }
            let n = content.count
            let cases: [(String, Range<Int>)] = [
                ("bytes=0-99", 0..<100),                                      // first bytes
                ("bytes=-500", (n - 500)..<n),                                // suffix
                ("bytes=1048000-", 1_048_000..<n),                            // open-ended, across the chunk edge
                ("bytes=1048575-1048576", 1_048_575..<1_048_577),             // exactly the chunk boundary
                ("bytes=100-99999999", 100..<n),                              // last-pos past the end is clamped
                ("bytes=-99999999", 0..<n),                                   // suffix longer than the content
            ]
            for (range, expected) in cases {
                let r = try await get(["Range": range])
                #expect(r.status.code == 206, "\(range)")
                #expect(r.body == Array(content[expected]), "\(range)")
                #expect(r.headers["Content-Range"] == "bytes \(expected.lowerBound)-\(expected.upperBound - 1)/\(n)", "\(range)")
                #expect(r.headers["Content-Length"] == "\(expected.count)")
            }
            for unsatisfiable in ["bytes=\(n)-", "bytes=5000000-5000001", "bytes=-0"] {
                let r = try await get(["Range": unsatisfiable])
                #expect(r.status.code == 416, "\(unsatisfiable)")
                #expect(r.headers["Content-Range"] == "bytes */\(n)")
            }
            for ignored in ["bytes=0-1,5-6", "items=0-5", "bytes=5-1", "bytes=abc"] {
                let r = try await get(["Range": ignored])
                #expect(r.status.code == 200, "\(ignored)")
                #expect(r.body.count == n)
            }
            let ifRangeMismatch = try await get(["Range": "bytes=0-9", "If-Range": "\"other\""])
            #expect(ifRangeMismatch.status.code == 200)

            let etag = try #require((try await get([:])).headers["ETag"])
            for inm in [etag, "W/\(etag)", "\"x\", \(etag)", "*"] {
                let r = try await get(["If-None-Match": inm])
                #expect(r.status.code == 304, "\(inm)")
                #expect(r.body.isEmpty)
                #expect(r.headers["ETag"] == etag)
            }
            #expect(try await get(["If-None-Match": "\"nope\""]).status.code == 200)

            let head = try await client.execute(HTTPClientRequest(method: .HEAD, url: url))
            #expect(head.status.code == 200)
            #expect(head.headers["Content-Length"] == "\(n)")

            let missing = try await client.get("http://127.0.0.1:\(service.port)/api/v4/attachments/" + String(repeating: "0", count: 64))
            #expect(missing.status.code == 404)
            for bad in ["xyz", String(repeating: "A", count: 64), String(repeating: "0", count: 63)] {
                #expect(try await client.get("http://127.0.0.1:\(service.port)/api/v4/attachments/\(bad)").status.code == 400, "\(bad)")
            }
            let put = try await client.execute(HTTPClientRequest(method: .PUT, url: url))
            #expect(put.status.code == 405)
            #expect(put.headers["Allow"] == "GET, HEAD")
        }
    }

    @Test func malformedUploads() async throws {
        try await Self.withService { service, client, db in
            let url = "http://127.0.0.1:\(service.port)/api/v4/attachments/upload"
            func post(_ contentType: String?, _ body: String) async throws -> Int {
                var h = HTTPHeaders()
                if let contentType { h.add("Content-Type", contentType) }
                return try await client.execute(HTTPClientRequest(method: .POST, url: url, headers: h, body: Array(body.utf8))).status.code
            }
            let twoFiles = "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n1\r\n--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n2\r\n--b--"
            let cases: [(String?, String, Int)] = [
                (nil, "x", 415),
                ("application/json", "{}", 415),
                ("multipart/form-data", "x", 400),
                ("multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--b--", 400),
                ("multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nunterminated", 400),
                ("multipart/form-data; boundary=b", "--b\r\nContent-Type: text/plain\r\n\r\nno disposition\r\n--b--", 400),
                ("multipart/form-data; boundary=b", twoFiles, 400),
            ]
            for (contentType, body, expected) in cases {
                let status = try await post(contentType, body)
                #expect(status == expected, "\(contentType ?? "none") \(body)")
            }
            #expect(try await Self.count(db, "bigpeer_attachments") == 0)
        }
    }

    /// Found by schemathesis: form-field names with NUL or control bytes are valid form data.
    @Test func oddPartHeadersAreAcceptedAndAnUnprintableContentTypeIsNotStored() async throws {
        try await Self.withService { service, client, _ in
            let body: [UInt8] = Array("--b\r\nContent-Disposition: form-data; name=\"".utf8) + [0, 0xC3, 0xAC, 0x0B] + Array("\"\r\n\r\nx\r\n".utf8)
                + Array("--b\r\nContent-Disposition: form-data; name=\"file\"\r\nContent-Type: text/pl".utf8) + [0, 0x01] + Array("ain\r\n\r\nabc\r\n--b--\r\n".utf8)
            let r = try await client.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(service.port)/api/v4/attachments/upload",
                                                               headers: ["Content-Type": "multipart/form-data; boundary=b"], body: body))
            #expect(r.status.code == 200)
            let id = try #require(try JSON.parse(r.body)["id"]?.stringValue)
            let get = try await client.get("http://127.0.0.1:\(service.port)/api/v4/attachments/\(id)")
            #expect(get.body == Array("abc".utf8))
            #expect(get.headers["Content-Type"] == "application/octet-stream")
        }
    }

    @Test func oversizeIs413AndStoresNothing() async throws {
        try await Self.withService(maxAttachmentBytes: 100_000) { service, client, db in
            let ok = try await Self.upload(client, service.port, Self.payload(100_000, seed: 3))
            #expect(ok.status.code == 200)
            // Within the HTTP limit (limit + multipart overhead), over the file limit: found while streaming.
            let over = try await Self.upload(client, service.port, Self.payload(100_001, seed: 4))
            #expect(over.status.code == 413)
            // Declared Content-Length far over: refused at the head.
            let huge = try await Self.upload(client, service.port, Self.payload(300_000, seed: 5))
            #expect(huge.status.code == 413)
            #expect(try await Self.count(db, "bigpeer_attachments") == 1)
            #expect(try await Self.count(db, "bigpeer_attachment_chunks") == 1)
        }
    }

    @Test func clientDisconnectingMidUploadLeavesNothingBehind() async throws {
        try await Self.withService { service, client, db in
            let content = Self.payload(3_000_000, seed: 6)
            let body = Self.multipart(content)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = UInt16(service.port).bigEndian
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            try #require(rc == 0)
            let head = Array(("POST /api/v4/attachments/upload HTTP/1.1\r\nHost: t\r\nContent-Type: multipart/form-data; boundary=----bp-test-boundary\r\n"
                              + "Content-Length: \(body.count)\r\n\r\n").utf8)
            let partial = head + body[0..<2_600_000]  // two full 1 MiB chunks reach the database
            var off = 0
            while off < partial.count {
                let n = partial[off...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { break }
                off += n
            }
            // Wait until the server's (uncommitted) transaction has written chunk rows: PostgreSQL
            // assigns a transaction id at the first write (`backend_xid`). (Not the table's
            // insert counters: a backend reports those up to 10 s after it goes idle.)
            let observer = try await db.connect()
            func openTransactions(writing: Bool) async throws -> Int64 {
                let writes = writing ? "AND backend_xid IS NOT NULL" : ""
                return try await observer.query(PostgresQuery(unsafeSQL: """
                    SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' \(writes)
                    """))[0].decode(0, as: Int64.self)
            }
            #expect(try await eventually { try await openTransactions(writing: true) > 0 })
            // shutdown first: a curl spawned by a concurrent test may have inherited the descriptor.
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
            #expect(try await eventually { try await openTransactions(writing: false) == 0 })  // the chunks were written, then rolled back
            #expect(try await Self.count(db, "bigpeer_attachments") == 0)
            #expect(try await Self.count(db, "bigpeer_attachment_chunks") == 0)
            await observer.close()

            // The same content uploads normally afterwards.
            let r = try await Self.upload(client, service.port, content)
            #expect(r.status.code == 200)
            #expect(try await Self.count(db, "bigpeer_attachment_chunks") == 3)
        }
    }

    @Test func openAPIDocumentIsServed() async throws {
        try await Self.withService { service, client, _ in
            let r = try await client.get("http://127.0.0.1:\(service.port)/api/v4/openapi.yaml")
            #expect(r.status.code == 200)
            #expect(r.headers["Content-Type"] == "application/yaml")
            let onDisk = try #require(FileManager.default.contents(atPath: FileManager.default.currentDirectoryPath + "/openapi.yaml"))
            #expect(r.body == [UInt8](onDisk))
        }
    }

    @Test func byteRangeEvaluation() {
        #expect(ByteRangeAnswer.evaluate(nil, length: 10) == .full)
        #expect(ByteRangeAnswer.evaluate("bytes=0-0", length: 10) == .single(0..<1))
        #expect(ByteRangeAnswer.evaluate(" Bytes = 2-4 ", length: 10) == .single(2..<5))
        #expect(ByteRangeAnswer.evaluate("bytes=-3", length: 10) == .single(7..<10))
        #expect(ByteRangeAnswer.evaluate("bytes=9-", length: 10) == .single(9..<10))
        #expect(ByteRangeAnswer.evaluate("bytes=10-", length: 10) == .unsatisfiable)
        // An empty attachment: any Range is ignored (200 with the empty body), never 416 — a
        // schema-valid request for a file the client does not know is empty succeeds.
        #expect(ByteRangeAnswer.evaluate("bytes=-1", length: 0) == .full)
        #expect(ByteRangeAnswer.evaluate("bytes=0-", length: 0) == .full)
        #expect(ByteRangeAnswer.evaluate("bytes=0-1023", length: 0) == .full)
        #expect(ByteRangeAnswer.evaluate("bytes=99999999999999999999999-", length: 10) == .unsatisfiable)
        #expect(ByteRangeAnswer.evaluate("bytes=0-99999999999999999999999", length: 10) == .single(0..<10))
        #expect(ByteRangeAnswer.evaluate("bytes=20-30,0-1", length: 10) == .full)  // several ranges: whole
        #expect(ByteRangeAnswer.evaluate("bytes=20-30,40-50", length: 10) == .unsatisfiable)
        for ignored in ["bytes=", "bytes=,", "bytes=1", "bytes=a-b", "bytes=3-2", "bytes=--1", "none=0-1", "bytes 0-1", "bytes=+1-2"] {
            #expect(ByteRangeAnswer.evaluate(ignored, length: 10) == .full, "\(ignored)")
        }
    }
}

extension AttachmentEndpointTests {
    /// An uploader's `Content-Type` cannot turn an attachment into a page in the server's origin:
    /// active and unknown types download as `application/octet-stream` + `attachment`, safe media
    /// types are served inline as their bare essence, and every answer says `nosniff` and
    /// `sandbox`. The stored type is left as uploaded.
    @Test func uploadedTypesCannotBecomeActiveContent() async throws {
        try await Self.withService { service, client, db in
            let page = Array("<html><script>alert(document.cookie)</script></html>".utf8)
            let cases: [(stored: String, served: String, inline: Bool)] = [
                ("text/html", "application/octet-stream", false),
                ("image/svg+xml", "application/octet-stream", false),
                ("application/xhtml+xml", "application/octet-stream", false),
                ("text/plain", "application/octet-stream", false),
                ("application/pdf", "application/octet-stream", false),
                ("image/png, text/html", "application/octet-stream", false),  // a list: browsers take the last
                ("text/html; x=\"image/png\"", "application/octet-stream", false),
                ("IMAGE/PNG; name=\"a.png\"", "image/png", true),
                ("video/mp4", "video/mp4", true),
            ]
            for (i, c) in cases.enumerated() {
                let content = page + Array(" \(i)".utf8)  // distinct bytes: each upload stores its own type
                let up = try await Self.upload(client, service.port, content, contentType: c.stored)
                let id = try #require(try JSON.parse(up.body)["id"]?.stringValue)
                let url = "http://127.0.0.1:\(service.port)/api/v4/attachments/\(id)"
                let r = try await client.get(url)
                #expect(r.status.code == 200, "\(c.stored)")
                #expect(r.body == content)
                #expect(r.headers["Content-Type"] == c.served, "\(c.stored)")
                #expect(r.headers["Content-Disposition"] == (c.inline ? nil : "attachment"), "\(c.stored)")
                #expect(r.headers["X-Content-Type-Options"] == "nosniff", "\(c.stored)")
                #expect(r.headers["Content-Security-Policy"] == "sandbox", "\(c.stored)")

                // Partial, conditional, HEAD and unsatisfiable answers say the same.
                let etag = try #require(r.headers["ETag"])
                for (method, headers, status) in [(HTTPMethod.GET, ["Range": "bytes=0-3"] as HTTPHeaders, 206),
                                                  (.GET, ["If-None-Match": etag], 304), (.HEAD, [:], 200),
                                                  (.GET, ["Range": "bytes=999999-"], 416)] {
                    let other = try await client.execute(HTTPClientRequest(method: method, url: url, headers: headers))
                    #expect(other.status.code == status)
                    #expect(other.headers["X-Content-Type-Options"] == "nosniff", "\(c.stored) \(status)")
                    #expect(other.headers["Content-Security-Policy"] == "sandbox", "\(c.stored) \(status)")
                    if status == 206 || (status == 200 && method == .HEAD) {
                        #expect(other.headers["Content-Type"] == c.served, "\(c.stored) \(status)")
                    }
                }

                // The metadata keeps what the uploader said.
                let conn = try await db.connect()
                let stored = try await conn.query("SELECT content_type FROM bigpeer_attachments WHERE id = \(id)")[0].decode(0, as: String.self)
                await conn.close()
                #expect(stored == c.stored)
            }
        }
    }

    @Test func mediaTypeEssence() {
        #expect(AttachmentServedType.essence(of: " Image/PNG ; q=1") == "image/png")
        #expect(AttachmentServedType.essence(of: "image/png, text/html") == nil)
        #expect(AttachmentServedType.essence(of: "image/png/x") == nil)
        #expect(AttachmentServedType.essence(of: "/png") == nil)
        #expect(AttachmentServedType.essence(of: "image/") == nil)
        #expect(AttachmentServedType.essence(of: "image /png") == nil)
        let none = AttachmentServedType.served(stored: nil)
        #expect(none.contentType == "application/octet-stream" && !none.inline)
        let audio = AttachmentServedType.served(stored: "audio/mpeg")
        #expect(audio.contentType == "audio/mpeg" && audio.inline)
    }
}
