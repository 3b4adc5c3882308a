import BigPeerServer
import Glibc
import Logging
import Testing
import Values

@Suite struct LogFormatTests {
    @Test func secretsAreRedacted() {
        let key = "bpk_0123456789abcdef_" + String(repeating: "a1", count: 32)
        #expect(LogRedaction.redact("key \(key) revoked") == "key bpk_0123456789abcdef_*** revoked")
        #expect(LogRedaction.redact("Authorization: Bearer abc.def.ghi") == "Authorization: Bearer ***")
        #expect(LogRedaction.redact("token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln end") == "token=eyJ*** end")
        #expect(LogRedaction.redact("postgres://app:s3cret@db:5432/x") == "postgres://app:***@db:5432/x")
        #expect(LogRedaction.redact("host=db password=s3cret user=app") == "host=db password=*** user=app")
        // Text without secrets is returned as it is.
        let plain = "request path=/api/v4/store/execute status=200 url=ws://node:8080/api/v4/sync"
        #expect(LogRedaction.redact(plain) == plain)
    }

    @Test func jsonLinesAreOneObjectWithFlattenedMetadata() throws {
        let sink = CapturingSink()
        var handler = BufferedStderrLogHandler(label: "bigpeer", format: .json, sink: sink.sink)
        handler.metadata = ["peer": "10.0.0.1", "time": "shadowed"]
        handler.log(event: LogEvent(level: .warning, message: "line \"one\"\nwith key bpk_00000000_ffff", metadata: ["nested": ["a": "1", "b": ["c": "2"]]],
                                    source: "Test", file: #fileID, function: #function, line: #line))
        sink.sink.flush()
        let text = sink.text()
        #expect(text.hasSuffix("}\n") && text.split(separator: "\n").count == 1)
        let object = try JSON.parse(text)
        #expect(object["level"] == .string("warning") && object["label"] == .string("bigpeer") && object["source"] == .string("Test"))
        #expect(object["message"] == .string("line \"one\"\nwith key bpk_00000000_***"))
        #expect(object["peer"] == .string("10.0.0.1") && object["nested.a"] == .string("1") && object["nested.b.c"] == .string("2"))
        #expect(object["meta.time"] == .string("shadowed"))
        guard case .string(let time) = object["time"] else { Issue.record("no time"); return }
        #expect(time.count == 24 && time.hasSuffix("Z") && time.dropFirst(10).first == "T")
    }
}

/// A `LogSink` writing into a pipe the test reads back.
final class CapturingSink: Sendable {
    let sink: LogSink
    private let readEnd: Int32

    init() {
        var fds: [Int32] = [0, 0]
        _ = pipe(&fds)
        readEnd = fds[0]
        sink = LogSink(fd: fds[1])
    }

    func text() -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = read(readEnd, &buffer, buffer.count)
        if n > 0 { out += buffer[..<n] }
        return String(decoding: out, as: UTF8.self)
    }
}
