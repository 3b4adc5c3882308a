import Sockets

/// Writes a streamed (chunked) response body. Each `write` queues one chunk on the connection and
/// returns at once, unless the peer is slow (output above the high-water mark): then it suspends
/// until the queue drains, so a producer (server-sent events, a large download) never buffers
/// more than the high-water mark. Throws `HTTPBodyWriter.Closed` once the connection is gone.
public final class HTTPBodyWriter: Sendable {
    public struct Closed: Error, Sendable {}

    private let connection: LoopBound<HTTPServerConnection>

    init(connection: LoopBound<HTTPServerConnection>) { self.connection = connection }

    public func write(_ bytes: [UInt8]) async throws {
        guard !bytes.isEmpty else { return }
        let connection = self.connection
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<Void, any Error>) in
            Self.onLoop(connection) { $0.streamWrite(bytes, resume: cont) }
        }
    }

    public func write(_ text: String) async throws { try await write(Array(text.utf8)) }

    /// Ends the body (the last chunk, RFC 9112 §7.1) and lets the connection take its next request.
    func finish() {
        Self.onLoop(connection) { $0.streamFinish() }
    }

    /// The producer failed: the body cannot be completed, so the connection is closed without the
    /// last chunk (the client sees a truncated message rather than a wrong one).
    func abort() {
        Self.onLoop(connection) { $0.streamAbort() }
    }

    private static func onLoop(_ c: LoopBound<HTTPServerConnection>, _ body: @escaping (HTTPServerConnection) -> Void) {
        if c.loop.inEventLoop {
            body(c.value)
        } else {
            let work = LoopBound(body, loop: c.loop)
            c.loop.execute { work.value(c.value) }
        }
    }
}
