import HTTP
import Logging

extension Logger.MetadataProvider {
    /// Adds `request_id` to every line logged while an HTTP request's handler runs (the id the
    /// response's `X-Request-ID` carries and the access log line shows).
    public static let requestID = Logger.MetadataProvider {
        HTTPRequest.currentLogID.map { ["request_id": "\($0)"] } ?? [:]
    }
}

extension AccessLogOutput {
    /// Access-log batches to `sink` (the buffered writer to stderr by default), in the format of
    /// the other log lines.
    public static func logSink(_ sink: LogSink = .standardError, format: BufferedStderrLogHandler.Format) -> AccessLogOutput {
        AccessLogOutput(format: format == .json ? .json : .text) { sink.enqueue(bytes: $0) }
    }
}
