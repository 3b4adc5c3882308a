@testable import HTTP
import Synchronization
import Testing

/// `AccessLogBuffer`: the exact bytes of an access-log line in both formats (the lines operators'
/// log pipelines parse), escaping in JSON, and batching: lines reach the output only when the
/// buffer passes `flushBytes` or on `flush()`, whole and in order, however long a line is.
@Suite struct AccessLogBufferTests {
    /// What the output received, batch by batch.
    final class Batches: Sendable {
        let received = Mutex<[[UInt8]]>([])
        var all: [[UInt8]] { received.withLock { $0 } }
        var text: String { String(decoding: all.joined(), as: UTF8.self) }
    }

    static func buffer(_ format: AccessLogOutput.Format) -> (AccessLogBuffer, Batches) {
        let batches = Batches()
        let buffer = AccessLogBuffer(output: AccessLogOutput(format: format) { bytes in batches.received.withLock { $0.append(Array(bytes)) } })
        return (buffer, batches)
    }

    static func line(method: HTTPMethod = .GET, target: String = "/healthz", status: Int = 200, duration: Int = 87, bytes: Int = 2,
                     requestID: String? = nil, loop: Int = 1, number: UInt64 = 42, peer: String = "127.0.0.1:5000") -> AccessLogBuffer.Line {
        let headers: HTTPHeaders = requestID.map { ["X-Request-ID": $0] } ?? [:]
        let head = HTTPRequestHead(method: method, target: target, version: .http1_1, headers: headers, keepAlive: true, expectsContinue: false)
        return AccessLogBuffer.Line(method: method, path: head.path, status: status, durationMicroseconds: duration, bytes: bytes,
                                    requestID: HTTPRequest.LogID(head: head, sequence: (loop, number)), peer: peer)
    }

    /// Splits `2026-11-26T13:50:00.123Z<rest>` (after `prefix`) into the checked time and the rest.
    static func dropTime(_ line: Substring, after prefix: String) -> Substring? {
        guard line.hasPrefix(prefix) else { return nil }
        let time = Array(line.dropFirst(prefix.count).prefix(24).utf8)
        guard time.count == 24 else { return nil }
        let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
        guard digits.allSatisfy({ (0x30...0x39).contains(time[$0]) }), time[4] == 0x2D, time[7] == 0x2D, time[10] == 0x54,
              time[13] == 0x3A, time[16] == 0x3A, time[19] == 0x2E, time[23] == 0x5A else { return nil }
        return line.dropFirst(prefix.count + 24)
    }

    @Test func textLine_isSwiftLogsShapeWithFixedFieldOrder() throws {
        let (buffer, batches) = Self.buffer(.text)
        buffer.append(Self.line())
        buffer.append(Self.line(method: .POST, target: "/api/v4/store/execute?x=secret", status: 404, duration: -5, bytes: -1, requestID: "probe-7"))
        #expect(batches.all.isEmpty, "nothing reaches the output before a flush")
        buffer.flush()
        let lines = batches.text.split(separator: "\n", omittingEmptySubsequences: false)
        try #require(lines.count == 3 && lines[2].isEmpty)
        #expect(Self.dropTime(lines[0], after: "") == " info bigpeer.access : method=GET path=/healthz status=200 duration_us=87 bytes=2 request_id=\(HTTPRequest.processTag)-1-42 peer=127.0.0.1:5000 [HTTP] request")
        #expect(Self.dropTime(lines[1], after: "") == " info bigpeer.access : method=POST path=/api/v4/store/execute status=404 duration_us=0 bytes=stream request_id=probe-7 peer=127.0.0.1:5000 [HTTP] request")
    }

    @Test func jsonLine_isOneObjectWithEscapedStrings() throws {
        let (buffer, batches) = Self.buffer(.json)
        buffer.append(Self.line(number: 7))
        buffer.append(Self.line(method: HTTPMethod("PA\"TCH"), target: "/a\"b\\c\u{1}d/é", status: 201, duration: 1_234_567, bytes: -1,
                                requestID: #"id"with\quote"#, peer: "[::1]:9"))
        buffer.flush()
        let lines = batches.text.split(separator: "\n", omittingEmptySubsequences: false)
        try #require(lines.count == 3 && lines[2].isEmpty)
        #expect(Self.dropTime(lines[0], after: #"{"time":""#) == #"","level":"info","label":"bigpeer.access","message":"request","method":"GET","path":"/healthz","status":200,"duration_us":87,"bytes":2,"request_id":"\#(HTTPRequest.processTag)-1-7","peer":"127.0.0.1:5000"}"#)
        #expect(Self.dropTime(lines[1], after: #"{"time":""#) == #"","level":"info","label":"bigpeer.access","message":"request","method":"PA\"TCH","path":"/a\"b\\c\u0001d/é","status":201,"duration_us":1234567,"bytes":null,"request_id":"id\"with\\quote","peer":"[::1]:9"}"#)
    }

    @Test func batches_flushPastFlushBytes_wholeLinesInOrder() throws {
        let (buffer, batches) = Self.buffer(.json)
        var sent = 0
        while batches.all.isEmpty {
            buffer.append(Self.line(number: UInt64(sent)))
            sent += 1
            try #require(sent < 10_000)
        }
        #expect(batches.all.count == 1 && batches.all[0].count >= AccessLogBuffer.flushBytes)
        #expect(batches.all[0].last == 0x0A)
        // A line far longer than a batch (every byte of the path escaped six-fold) arrives whole.
        let long = "/" + String(repeating: "\u{1}", count: AccessLogBuffer.flushBytes)
        buffer.append(Self.line(target: long, number: UInt64(sent)))
        sent += 1
        buffer.append(Self.line(number: UInt64(sent)))
        sent += 1
        buffer.flush()
        buffer.flush()  // nothing left: no empty batch
        #expect(batches.all.allSatisfy { !$0.isEmpty && $0.last == 0x0A })
        let lines = batches.text.split(separator: "\n")
        try #require(lines.count == sent)
        for (i, line) in lines.enumerated() { #expect(line.hasSuffix(#"-1-\#(i)","peer":"127.0.0.1:5000"}"#)) }
        let escaped = #""path":"/"# + String(repeating: #"\u0001"#, count: AccessLogBuffer.flushBytes) + #"","#
        #expect(lines.filter { $0.utf8.count > 6 * AccessLogBuffer.flushBytes }.map { $0.contains(escaped) } == [true])
    }
}
