import Sockets

/// The content of a request handled by a `.streaming` route, read as it arrives.
///
/// The connection buffers at most `InboundBody.highWaterMark` bytes ahead of the handler: past that
/// it stops reading the socket (TCP flow control slows the client) until the handler has taken
/// enough. So a 64 MiB upload costs the server a few hundred KiB, however fast the client sends.
///
/// `next()` throws `HTTPRequestBody.Failed` when the content cannot be completed: the client went
/// away or sent a truncated message, the body timeout passed, the framing was invalid, or the
/// route's size limit was exceeded. The connection has then been answered (if it still could be)
/// and closed; whatever the handler returns afterwards is discarded.
public final class HTTPRequestBody: Sendable {
    public struct Failed: Error, Sendable, CustomStringConvertible {
        public enum Reason: Sendable { case disconnected, timeout, malformed, tooLarge, finished }
        public let reason: Reason
        public var description: String {
            switch reason {
            case .disconnected: "the client closed the connection before the content was complete"
            case .timeout: "the content did not arrive in time"
            case .malformed: "the content framing is invalid"
            case .tooLarge: "the content exceeds the size limit"
            case .finished: "the response was already sent"
            }
        }
    }

    private let connection: LoopBound<HTTPServerConnection>
    private let generation: UInt64

    init(connection: LoopBound<HTTPServerConnection>, generation: UInt64) {
        self.connection = connection
        self.generation = generation
    }

    /// The next piece of content, or nil once all of it has been read.
    public func next() async throws -> [UInt8]? {
        let connection = self.connection, generation = self.generation
        return try await withCheckedThrowingContinuation { (cont: CheckedContinuation<[UInt8]?, any Error>) in
            if connection.loop.inEventLoop {
                connection.value.inboundNext(generation: generation, resume: cont)
            } else {
                connection.loop.execute { connection.value.inboundNext(generation: generation, resume: cont) }
            }
        }
    }

    /// Reads everything (at most `limit` bytes; `Failed(.tooLarge)` beyond).
    public func collect(upTo limit: Int) async throws -> [UInt8] {
        var out: [UInt8] = []
        while let piece = try await next() {
            guard out.count + piece.count <= limit else { throw Failed(reason: .tooLarge) }
            out.append(contentsOf: piece)
        }
        return out
    }
}

/// Connection-side state of one streamed request body. Loop-owned (a field of the connection).
struct InboundBody {
    /// Stop reading the socket once this much content waits for the handler.
    static let highWaterMark = 256 * 1024
    /// Resume reading once the handler has taken the buffer below this.
    static let lowWaterMark = 64 * 1024

    let generation: UInt64
    var pieces: [[UInt8]] = []
    var head = 0
    var bufferedBytes = 0
    var ended = false
    var failure: HTTPRequestBody.Failed?
    var waiter: CheckedContinuation<[UInt8]?, any Error>?

    init(generation: UInt64) { self.generation = generation }

    /// Hands a piece to a waiting reader, or buffers it.
    mutating func deliver(_ piece: [UInt8]) {
        if let w = waiter {
            waiter = nil
            w.resume(returning: piece)
        } else {
            pieces.append(piece)
            bufferedBytes += piece.count
        }
    }

    mutating func end() {
        ended = true
        if let w = waiter {
            waiter = nil
            w.resume(returning: nil)
        }
    }

    mutating func fail(_ reason: HTTPRequestBody.Failed.Reason) {
        // Content that arrived complete stays readable; otherwise the first failure sticks.
        guard failure == nil, !ended else { return }
        failure = HTTPRequestBody.Failed(reason: reason)
        pieces = []
        head = 0
        bufferedBytes = 0
        if let w = waiter {
            waiter = nil
            w.resume(throwing: HTTPRequestBody.Failed(reason: reason))
        }
    }

    /// Answers a `next()`: a buffered piece, the end, the failure, or parks the reader.
    mutating func take(_ resume: CheckedContinuation<[UInt8]?, any Error>) {
        if let failure { return resume.resume(throwing: failure) }
        if head < pieces.count {
            let piece = pieces[head]
            head += 1
            bufferedBytes -= piece.count
            if head == pieces.count {
                pieces.removeAll(keepingCapacity: true)
                head = 0
            }
            return resume.resume(returning: piece)
        }
        if ended { return resume.resume(returning: nil) }
        if let old = waiter { old.resume(throwing: HTTPRequestBody.Failed(reason: .finished)) }  // concurrent readers: misuse
        waiter = resume
    }
}
