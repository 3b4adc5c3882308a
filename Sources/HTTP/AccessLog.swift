import Glibc
import Sockets

/// Where a server's access log goes: `write` receives many whole lines at once (tens of KiB),
/// already formatted, and must not block (the caller is an event loop): `bigpeer serve` hands them
/// to the buffered log writer, which writes them to stderr off the loops. The bytes are lent for
/// the call only (they are the loop's reused buffer): copy what you keep.
public struct AccessLogOutput: Sendable {
    public enum Format: String, Sendable { case text, json }
    public let format: Format
    public let label: String
    public let write: @Sendable (UnsafeRawBufferPointer) -> Void

    public init(format: Format, label: String = "bigpeer.access", write: @escaping @Sendable (UnsafeRawBufferPointer) -> Void) {
        self.format = format
        self.label = label
        self.write = write
    }
}

/// One loop's access-log lines, formatted straight into a reused byte buffer (no `String`, no
/// metadata dictionary, no allocation per request: `AccessLogFormatter`) and handed to the output
/// when they pass `flushBytes` or at the next sweep, so the output sees one call per batch.
/// Loop-owned.
final class AccessLogBuffer {
    static let flushBytes = 32 << 10
    let output: AccessLogOutput
    private var formatter: AccessLogFormatter

    init(output: AccessLogOutput) {
        self.output = output
        formatter = AccessLogFormatter(json: output.format == .json, label: output.label, initialCapacity: Self.flushBytes + 1024)
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
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        formatter.append(line, now: now)
        if formatter.count >= Self.flushBytes { flush() }
    }

    /// Hands what is buffered to the output (on the sweep, at drain and at close).
    func flush() {
        guard formatter.count > 0 else { return }
        formatter.withLines { output.write($0) }
    }
}
