import Foundation
import Testing
@testable import HTTP

@Suite struct HTTPParserTests {
    private func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// Parses `input` at every chunking and checks they all agree with the one-piece parse.
    private func parsedEverywhere(_ input: String, kind: HTTPParser.Kind = .request, limits: HTTPParserLimits = HTTPParserLimits(),
                                  eof: Bool = false) -> [Parsed] {
        let raw = bytes(input)
        let reference = parse(raw, pieces: [raw.count], kind: kind, limits: limits, eof: eof)
        for pieces in chunkings(for: raw.count) {
            let got = parse(raw, pieces: pieces, kind: kind, limits: limits, eof: eof)
            #expect(got == reference, "chunking \(pieces.prefix(8))… disagrees")
            if got != reference { break }
        }
        return reference
    }

    /// A declared Content-Length is reserved only once an eighth of it has arrived: a client that
    /// declares much and sends little gets no large reservation.
    @Test func declaredBodyIsReservedOnlyOnceAnEighthArrived() throws {
        var limits = HTTPParserLimits()
        limits.maxBodyBytes = 64 << 20
        var p = HTTPParser(limits: limits)
        let declared = 8 << 20
        p.feed(Array("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: \(declared)\r\n\r\n".utf8))
        guard case .requestHead = try p.next() else { Issue.record("no head"); return }
        var sent = 0
        func send(_ n: Int) throws {
            p.feed([UInt8](repeating: 0x61, count: n))
            sent += n
            _ = try p.next()
        }
        try send(1000)
        try send(1000)
        #expect(p.bodyCapacity < 64 << 10, "reserved \(p.bodyCapacity) after \(sent) bytes")
        while sent < declared / 8 + 1000 { try send(64 << 10) }
        try send(1000)
        #expect(p.bodyCapacity >= declared)
        while sent < declared { try send(min(64 << 10, declared - sent)) }
        #expect(p.takeBody().count == declared)
    }

    @Test func simpleGetAtEverySplitPoint() {
        let got = parsedEverywhere("GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\nX-Trace:  v 1 \r\n\r\n")
        #expect(got == [
            .head(method: "GET", target: "/healthz?x=1", version: .http1_1, headers: ["Host: a", "X-Trace: v 1"], keepAlive: true, expectsContinue: false),
            .message(body: [], trailers: []),
        ])
    }

    @Test func pipelinedRequestsWithContentLengthAndChunkedBodies() {
        let input = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
            + "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-Sum: 13\r\n\r\n"
            + "GET /c HTTP/1.0\r\n\r\n"
        let got = parsedEverywhere(input)
        #expect(got.count == 6)
        #expect(got[1] == .message(body: bytes("hello"), trailers: []))
        #expect(got[3] == .message(body: bytes("abc0123456789"), trailers: ["X-Sum: 13"]))
        if case .head(_, _, let version, _, let keepAlive, _) = got[4] {
            #expect(version == .http1_0)
            #expect(!keepAlive)
        } else {
            Issue.record("expected HTTP/1.0 head")
        }
    }

    @Test func keepAliveRules() {
        let got = parsedEverywhere("GET / HTTP/1.1\r\nHost: h\r\nConnection: Keep-Alive, Close\r\n\r\nGET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        guard case .head(_, _, _, _, let k1, _) = got[0], case .head(_, _, _, _, let k2, _) = got[2] else {
            Issue.record("heads missing"); return
        }
        #expect(!k1)
        #expect(k2)
    }

    @Test func expectContinueIsReported() {
        let got = parsedEverywhere("PUT /x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\nok")
        guard case .head(_, _, _, _, _, let expects) = got[0] else { Issue.record("no head"); return }
        #expect(expects)
    }

    @Test func leadingEmptyLineIsIgnored() {
        let got = parsedEverywhere("\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
        #expect(got.count == 2)
    }

    // MARK: - Smuggling and limits: each case with its exact status.

    private func status(_ input: String, limits: HTTPParserLimits = HTTPParserLimits()) -> Int? {
        let got = parsedEverywhere(input, limits: limits)
        if case .error(let e)? = got.last { return e.status.code }
        return nil
    }

    @Test(arguments: [
        ("content-length with transfer-encoding", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("transfer-encoding before content-length", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400),
        ("duplicate content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400),
        ("list content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\nabc", 400),
        ("signed content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc", 400),
        ("hex content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x3\r\n\r\nabc", 400),
        ("huge content-length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        ("unknown transfer coding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        ("chunked not last", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501),
        ("xchunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
        ("chunked twice", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("transfer-encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("obs-fold", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  continued\r\n\r\n", 400),
        ("bare CR in value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r2\r\n\r\n", 400),
        ("bare LF line end", "GET / HTTP/1.1\nHost: h\r\n\r\n", 400),
        ("space before colon", "GET / HTTP/1.1\r\nHost: h\r\nContent-Length : 3\r\n\r\nabc", 400),
        ("invalid header name", "GET / HTTP/1.1\r\nHost: h\r\nX(A): 1\r\n\r\n", 400),
        ("empty header name", "GET / HTTP/1.1\r\nHost: h\r\n: 1\r\n\r\n", 400),
        ("NUL in value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\u{0}b\r\n\r\n", 400),
        ("missing host", "GET / HTTP/1.1\r\n\r\n", 400),
        ("two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("bad chunk size", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        ("chunk size overflow", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF\r\n", 400),
        ("chunk without CRLF", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n", 400),
        ("HTTP/2.0 request line", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
        ("garbage version", "GET / HTTQ/1.1\r\nHost: h\r\n\r\n", 400),
        ("lowercase version", "GET / http/1.1\r\nHost: h\r\n\r\n", 400),
        ("invalid method", "G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("space in target", "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("relative target", "GET a HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        ("unknown expectation", "POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na", 417),
    ])
    func rejectsWithExactStatus(_ name: String, _ input: String, _ expected: Int) {
        #expect(status(input) == expected, "\(name)")
    }

    @Test func requestLineLimitIs414() {
        var limits = HTTPParserLimits()
        limits.maxRequestLineLength = 64
        #expect(status("GET /" + String(repeating: "a", count: 80) + " HTTP/1.1\r\nHost: h\r\n\r\n", limits: limits) == 414)
        // Still incomplete (no CRLF yet) but already too long: rejected before buffering more.
        let partial = parse(bytes("GET /" + String(repeating: "a", count: 200)), pieces: [10, 10, 10, 10, 10, 10, 10, 10, 200], limits: limits)
        #expect(partial.last == .error(.requestLineTooLong))
        // Exactly at the limit passes.
        let ok = "GET /" + String(repeating: "a", count: 64 - 14) + " HTTP/1.1"
        #expect(ok.utf8.count == 64)
        #expect(status(ok + "\r\nHost: h\r\n\r\n", limits: limits) == nil)
    }

    @Test func headerSectionLimitIs431() {
        var limits = HTTPParserLimits()
        limits.maxHeaderBytes = 256
        #expect(status("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + String(repeating: "v", count: 300) + "\r\n\r\n", limits: limits) == 431)
        let partial = parse(bytes("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + String(repeating: "v", count: 1000)), pieces: [50, 50, 50, 50, 50, 50, 1000], limits: limits)
        #expect(partial.last == .error(.headerSectionTooLarge))
    }

    @Test func headerCountLimitIs431() {
        var limits = HTTPParserLimits()
        limits.maxHeaderCount = 10
        let fields = (0..<11).map { "X-\($0): v\r\n" }.joined()
        #expect(status("GET / HTTP/1.1\r\nHost: h\r\n" + fields + "\r\n", limits: limits) == 431)
        let nine = (0..<9).map { "X-\($0): v\r\n" }.joined()
        #expect(status("GET / HTTP/1.1\r\nHost: h\r\n" + nine + "\r\n", limits: limits) == nil)
    }

    @Test func bodyLimitIs413ForContentLengthBeforeAnyContent() {
        var limits = HTTPParserLimits()
        limits.maxBodyBytes = 10
        #expect(status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n", limits: limits) == 413)
        #expect(status("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789", limits: limits) == nil)
    }

    @Test func bodyLimitIs413ForChunkedAsSoonAsAChunkSizeExceedsIt() {
        var limits = HTTPParserLimits()
        limits.maxBodyBytes = 10
        #expect(status("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n5\r\n", limits: limits) == 413)
    }

    @Test func trailerCountIsLimited() {
        var limits = HTTPParserLimits()
        limits.maxHeaderCount = 3
        let trailers = (0..<4).map { "T-\($0): v\r\n" }.joined()
        #expect(status("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailers + "\r\n", limits: limits) == 431)
    }

    @Test func errorsAreSticky() {
        var parser = HTTPParser()
        parser.feed(Array("GET / HTTP/1.1\nHost: h\r\n\r\n".utf8))
        #expect(throws: HTTPParseError.malformed(.bareLF)) { try parser.next() }
        parser.feed(Array("GET / HTTP/1.1\r\nHost: h\r\n\r\n".utf8))
        #expect(throws: HTTPParseError.malformed(.bareLF)) { try parser.next() }
    }

    @Test func upgradeLeavesFollowingBytesForTheNewProtocol() throws {
        var parser = HTTPParser()
        parser.feed(Array("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\u{81}\u{05}".utf8))
        guard case .requestHead = try parser.next(), case .end = try parser.next() else { Issue.record("no request"); return }
        #expect(parser.takeBufferedBytes() == [0xC2, 0x81, 0x05])  // U+0081 is two UTF-8 bytes
    }

    // MARK: - Responses (client side)

    @Test func responsesAtEverySplitPoint() {
        let got = parsedEverywhere("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", kind: .response)
        #expect(got == [
            .response(status: 200, headers: ["Content-Length: 2"]), .message(body: bytes("hi"), trailers: []),
            .response(status: 204, headers: []), .message(body: [], trailers: []),
            .response(status: 200, headers: ["Transfer-Encoding: chunked"]), .message(body: bytes("ab"), trailers: []),
        ])
    }

    @Test func responseWithoutLengthReadsUntilClose() {
        let got = parsedEverywhere("HTTP/1.0 200 OK\r\n\r\nall of it", kind: .response, eof: true)
        #expect(got.last == .message(body: bytes("all of it"), trailers: []))
    }

    @Test func truncatedResponseIsAnError() {
        let got = parse(bytes("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"), pieces: [100], kind: .response, eof: true)
        #expect(got.last == .error(.malformed(.truncated)))
    }
}

/// Every input libFuzzer ever flagged (Fuzz/HTTPParse/crashers) stays a test: parsed whole and at
/// every chunking, with the fuzz target's small limits, it gives the same events.
@Suite struct HTTPParserFuzzRegressionTests {
    @Test func pastCrashersParseTheSameAtEveryChunking() throws {
        let dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Fuzz/HTTPParse/crashers").standardized
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        #expect(!files.isEmpty)
        var limits = HTTPParserLimits()
        limits.maxRequestLineLength = 512
        limits.maxHeaderBytes = 2048
        limits.maxHeaderCount = 16
        limits.maxBodyBytes = 4096
        limits.maxChunkLineLength = 64
        for name in files {
            let raw = try [UInt8](Data(contentsOf: dir.appendingPathComponent(name)))
            guard let selector = raw.first else { continue }
            let input = Array(raw.dropFirst())
            let kind: HTTPParser.Kind = selector & 0x80 == 0 ? .request : .response
            let reference = parse(input, pieces: [input.count], kind: kind, limits: limits, eof: true)
            for pieces in chunkings(for: input.count) {
                #expect(parse(input, pieces: pieces, kind: kind, limits: limits, eof: true) == reference, "\(name)")
            }
        }
    }
}

@Suite struct ByteClassTests {
    @Test func tcharAndFieldValueMatchRFC9110ForAllBytes() {
        let tchars = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        for b in 0...255 {
            let byte = UInt8(b)
            #expect(ByteClass.isTchar(byte) == tchars.contains(byte), "tchar \(b)")
            let field = byte == 0x09 || byte == 0x20 || (0x21...0x7E).contains(byte) || byte >= 0x80
            #expect(ByteClass.isFieldValue(byte) == field, "field value \(b)")
        }
    }
}
