import Dispatch
import Glibc
import Logging
import Synchronization
import Values

/// A swift-log handler that never writes on the caller's thread: lines are formatted into a shared
/// buffer and written to standard error by one background writer.
///
/// Why: at `info` the HTTP server logs every request from its event-loop thread. swift-log's
/// `StreamLogHandler` does a locked `fwrite` + `fflush` (a `write(2)` per line) right there, so a
/// slow terminal or pipe stalls every connection on that loop, and even a fast one costs a
/// syscall per request. Here a request pays for formatting and one uncontended lock; the writer
/// (a serial `DispatchQueue`, not Swift's cooperative pool, so its blocking `write` never starves
/// tasks) drains everything queued with one `write` per batch.
///
/// Bounded: at most `LogSink.maxBufferedBytes` wait; beyond that lines are dropped and counted,
/// and the count is reported in the stream once the writer catches up. `LogSink.flush()` waits
/// until everything queued so far is written (called at shutdown).
///
/// Two formats (`--log-format`): `text`, swift-log's `time level label : key=value [source]
/// message`, and `json`, one object per line (see `jsonLine`). Both pass the message and every
/// metadata value through `LogRedaction`.
public struct BufferedStderrLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable { case text, json }

    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let format: Format
    private let sink: LogSink

    public init(label: String, format: Format = .text, sink: LogSink = .standardError) {
        self.label = label
        self.format = format
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        let fields = Self.flatten(merged).map { ($0.key, LogRedaction.printedOnPurpose.contains($0.key) ? $0.value : LogRedaction.redact($0.value)) }
        let message = LogRedaction.redact("\(event.message)")
        switch format {
        case .text:
            var text = LogSink.timestamp()
            text += " \(event.level) \(label) :"
            for (key, value) in fields { text += " \(key)=\(value)" }
            text += " [\(event.source)] \(message)\n"
            sink.enqueue(Array(text.utf8))
        case .json:
            sink.enqueue(Self.jsonLine(level: event.level, label: label, message: message, source: event.source, fields: fields))
        }
    }

    /// `{"time":"2026-11-26T13:50:00.123Z","level":"info","label":"bigpeer","message":"…",
    /// "source":"BigPeerServer",…metadata}`: time in RFC 3339 UTC, every metadata value a string at
    /// the top level (nested dictionaries as `outer.inner`); a key that would shadow one of the
    /// fixed fields is written as `meta.KEY`.
    static func jsonLine(level: Logger.Level, label: String, message: String, source: String, fields: [(String, String)]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + message.utf8.count)
        let fixed: [(String, String)] = [("time", LogSink.utcTimestamp()), ("level", "\(level)"), ("label", label), ("message", message), ("source", source)]
        let reserved = Set(fixed.map(\.0))
        for (i, (key, value)) in (fixed + fields.map { (reserved.contains($0.0) ? "meta.\($0.0)" : $0.0, $0.1) }).enumerated() {
            out.append(i == 0 ? UInt8(ascii: "{") : UInt8(ascii: ","))
            JSONWriter.writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            JSONWriter.writeString(value, into: &out)
        }
        out.append(contentsOf: "}\n".utf8)
        return out
    }

    /// Metadata as sorted `key=value` pairs, nested dictionaries flattened with dotted keys.
    static func flatten(_ metadata: Logger.Metadata, prefix: String = "") -> [(key: String, value: String)] {
        var out: [(key: String, value: String)] = []
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            if case .dictionary(let nested) = value {
                out += flatten(nested, prefix: prefix + key + ".")
            } else {
                out.append((prefix + key, "\(value)"))
            }
        }
        return out
    }
}

/// The buffer and writer behind `BufferedStderrLogHandler` (one per output file descriptor).
public final class LogSink: Sendable {
    public static let standardError = LogSink(fd: 2)
    public static let maxBufferedBytes = 4 << 20

    private struct State {
        var pending: [UInt8] = []
        var writerScheduled = false
        var dropped = 0
    }

    private let fd: Int32
    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "bigpeer.log-writer")

    public init(fd: Int32) { self.fd = fd }

    /// Queues whole lines (one or many) for the writer; never blocks on the output.
    public func enqueue(_ line: [UInt8]) {
        line.withUnsafeBytes { enqueue(bytes: $0) }
    }

    /// Queues whole lines lent for the call (copied once, into the writer's buffer).
    public func enqueue(bytes line: UnsafeRawBufferPointer) {
        let schedule = state.withLock { s -> Bool in
            guard s.pending.count + line.count <= Self.maxBufferedBytes else {
                s.dropped += 1
                return false
            }
            s.pending.append(contentsOf: line)
            if s.writerScheduled { return false }
            s.writerScheduled = true
            return true
        }
        if schedule { queue.async { self.drain() } }
    }

    /// Blocks until every line queued before the call is written. Never call it on an event loop.
    public func flush() {
        queue.sync { self.drain() }
    }

    /// Writes batches until the buffer is empty (runs on `queue` only).
    private func drain() {
        while true {
            let (batch, dropped) = state.withLock { s -> ([UInt8], Int) in
                let out = (s.pending, s.dropped)
                s.pending = []
                s.dropped = 0
                if out.0.isEmpty && out.1 == 0 { s.writerScheduled = false }
                return out
            }
            if batch.isEmpty && dropped == 0 { return }
            if dropped > 0 { writeAll(Array("\(Self.timestamp()) warning bigpeer : dropped=\(dropped) [BigPeerServer] log lines dropped: the log output is slower than the server\n".utf8)) }
            writeAll(batch)
        }
    }

    private func writeAll(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buf in
            guard let base = buf.baseAddress else { return }
            var offset = 0
            while offset < buf.count {
                let n = Glibc.write(fd, base + offset, buf.count - offset)
                if n > 0 { offset += n; continue }
                if n < 0 && errno == EINTR { continue }
                return  // stderr closed or broken: nothing sensible left to do with log lines
            }
        }
    }

    /// UTC with milliseconds, RFC 3339: `2026-11-22T11:34:25.123Z` (the JSON format's `time`).
    static func utcTimestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        gmtime_r(&now.tv_sec, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S", &parts)
        let millis = now.tv_nsec / 1_000_000
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self) + ".\(fraction)Z"
    }

    /// Local time as `2026-11-22T11:34:25+0000` (the format swift-log's stream handler prints).
    static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
