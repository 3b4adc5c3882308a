import Glibc
import Sockets

/// Where a server's access log goes: `write` receives many whole lines at once (tens of KiB),
/// already formatted, and must not block (the caller is an event loop): `bigpeer serve` hands them
/// to the buffered log writer, which writes them to stderr off the loops.
public struct AccessLogOutput: Sendable {
    public enum Format: String, Sendable { case text, json }
    public let format: Format
    public let label: String
    public let write: @Sendable ([UInt8]) -> Void

    public init(format: Format, label: String = "bigpeer.access", write: @escaping @Sendable ([UInt8]) -> Void) {
        self.format = format
        self.label = label
        self.write = write
    }
}

/// One loop's access-log lines, formatted straight into a byte buffer (no `String`, no metadata
/// dictionary per request) and handed to the output when it passes `flushBytes` or at the next
/// sweep, so a request costs a few appends and the output sees one call per batch. Loop-owned.
final class AccessLogBuffer {
    static let flushBytes = 32 << 10
    let output: AccessLogOutput
    private var bytes: [UInt8] = []
    private var second = -1
    /// `2026-11-26T13:50:00` for `second`, then the fraction and zone are added per line.
    private var stamp: [UInt8] = []

    init(output: AccessLogOutput) {
        self.output = output
        bytes.reserveCapacity(Self.flushBytes + 1024)
    }

    struct Line {
        var method: HTTPMethod
        var path: Substring
        var status: Int
        var durationMicroseconds: Int
        var bytes: Int
        var requestID: HTTPRequest.LogID
        var peer: String
    }

    func append(_ line: Line) {
        let json = output.format == .json
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_sec != second { second = now.tv_sec; stamp = Self.utcStamp(now.tv_sec) }
        if json { bytes.append(contentsOf: #"{"time":""#.utf8) }
        bytes.append(contentsOf: stamp)
        bytes.append(0x2E)
        Self.appendPadded(now.tv_nsec / 1_000_000, width: 3, to: &bytes)
        bytes.append(0x5A)  // Z
        if json {
            bytes.append(contentsOf: #"","level":"info","label":""#.utf8)
            bytes.append(contentsOf: output.label.utf8)
            bytes.append(contentsOf: #"","message":"request","method":""#.utf8)
        } else {
            bytes.append(contentsOf: " info ".utf8)
            bytes.append(contentsOf: output.label.utf8)
            bytes.append(contentsOf: " : method=".utf8)
        }
        field(line.method.rawValue.utf8, json: json)
        key("path", json: json, afterString: true)
        field(line.path.utf8, json: json)
        key("status", json: json, afterString: true, string: false)
        ResponseHeadWriter.appendDecimal(line.status, to: &bytes)
        key("duration_us", json: json, afterString: false, string: false)
        ResponseHeadWriter.appendDecimal(max(0, line.durationMicroseconds), to: &bytes)
        key("bytes", json: json, afterString: false, string: false)
        if line.bytes < 0 { bytes.append(contentsOf: json ? "null".utf8 : "stream".utf8) } else { ResponseHeadWriter.appendDecimal(line.bytes, to: &bytes) }
        key("request_id", json: json, afterString: false)
        line.requestID.append(to: &bytes, jsonEscaped: json)
        key("peer", json: json, afterString: true)
        field(line.peer.utf8, json: json)
        bytes.append(contentsOf: json ? "\"}\n".utf8 : " [HTTP] request\n".utf8)
        if bytes.count >= Self.flushBytes { flush() }
    }

    /// Hands what is buffered to the output (on the sweep, at drain and at close).
    func flush() {
        guard !bytes.isEmpty else { return }
        let batch = bytes
        bytes = []
        bytes.reserveCapacity(Self.flushBytes + 1024)
        output.write(batch)
    }

    /// Ends the previous field and starts `name`: in JSON `","name":"` (closing the previous
    /// value's quote if it was a string, opening this one's if it is), in text ` name=`.
    private func key(_ name: StaticString, json: Bool, afterString: Bool, string: Bool = true) {
        let name = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        guard json else {
            bytes.append(0x20)
            bytes.append(contentsOf: name)
            bytes.append(0x3D)
            return
        }
        bytes.append(contentsOf: afterString ? #"",""#.utf8 : #",""#.utf8)
        bytes.append(contentsOf: name)
        bytes.append(contentsOf: string ? #"":""#.utf8 : #"":"#.utf8)
    }

    private func field<C: Collection<UInt8>>(_ value: C, json: Bool) {
        if json { Self.appendJSONEscaped(value, to: &bytes) } else { bytes.append(contentsOf: value) }
    }

    /// The inside of a JSON string: `"`, `\` and control bytes escaped; other bytes as they are.
    static func appendJSONEscaped<C: Collection<UInt8>>(_ value: C, to out: inout [UInt8]) {
        for b in value {
            switch b {
            case 0x22, 0x5C: out.append(0x5C); out.append(b)
            case 0..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(Self.hex[Int(b >> 4)])
                out.append(Self.hex[Int(b & 0xF)])
            default: out.append(b)
            }
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    static func appendPadded(_ value: Int, width: Int, to out: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var v = value
        while divisor > 0 { out.append(UInt8(v / divisor % 10) + 0x30); v %= divisor; divisor /= 10 }
    }

    /// `YYYY-MM-DDTHH:MM:SS` in UTC (RFC 3339).
    static func utcStamp(_ seconds: Int) -> [UInt8] {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        var out: [UInt8] = []
        appendPadded(Int(parts.tm_year) + 1900, width: 4, to: &out); out.append(0x2D)
        appendPadded(Int(parts.tm_mon) + 1, width: 2, to: &out); out.append(0x2D)
        appendPadded(Int(parts.tm_mday), width: 2, to: &out); out.append(0x54)
        appendPadded(Int(parts.tm_hour), width: 2, to: &out); out.append(0x3A)
        appendPadded(Int(parts.tm_min), width: 2, to: &out); out.append(0x3A)
        appendPadded(Int(parts.tm_sec), width: 2, to: &out)
        return out
    }
}
