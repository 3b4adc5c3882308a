import Dispatch
import Glibc
import Logging
import Synchronization

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
public struct BufferedStderrLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let sink: LogSink

    public init(label: String, sink: LogSink = .standardError) {
        self.label = label
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
        var text = LogSink.timestamp()
        text += " \(event.level) \(label) :"
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) { text += " \(key)=\(value)" }
        text += " [\(event.source)] \(event.message)\n"
        sink.enqueue(Array(text.utf8))
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

    func enqueue(_ line: [UInt8]) {
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
