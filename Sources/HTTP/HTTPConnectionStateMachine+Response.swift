import Sockets

// The response side of the connection's decisions: whether it stays open after an answer, the
// framing of a streamed body, and the timeouts the loop's sweeper checks.
extension HTTPConnectionStateMachine {
    /// The handler's answer is about to be written: the request's head and whether the
    /// connection stays open after it. nil when no request is being handled (the answer is late:
    /// the connection closed or was answered already).
    mutating func responseStarting(draining: Bool) -> (head: HTTPRequestHead, keepAlive: Bool)? {
        guard phase == .handling, let head = current else { return nil }
        if bodyStreaming {
            // Answered before reading all the content: the rest is never parsed, so the
            // connection cannot carry another request.
            bodyStreaming = false
            closeAfterResponse = true
            pausedForInbound = false
        }
        let keepAlive = head.keepAlive && !closeAfterResponse && !draining && requestsServed < maxRequestsPerConnection
        return (head, keepAlive)
    }

    /// The connection was handed to another protocol; returns the bytes read past the request.
    mutating func upgraded() -> [UInt8] {
        phase = .upgraded
        return parser.takeBufferedBytes()
    }

    /// A streamed body's head went out and its producer starts: `chunked` (HTTP/1.1) or, with
    /// `length`, a `.sizedStream`, else delimited by the close.
    mutating func streamStarted(chunked: Bool, length: Int?, keepAlive: Bool) {
        streamChunked = chunked
        streamRemaining = length
        closeAfterResponse = !keepAlive
        phase = .streaming
    }

    enum StreamFraming: Equatable {
        /// Not streaming (any more): the producer's write fails.
        case notStreaming
        /// Write the bytes as they are (a sized or close-delimited body).
        case raw
        case chunk
        /// More than the announced Content-Length would corrupt the framing of the next
        /// response: close.
        case overrun
    }

    /// The producer writes `count` bytes.
    mutating func streamWrite(count: Int) -> StreamFraming {
        guard phase == .streaming else { return .notStreaming }
        if let remaining = streamRemaining {
            guard count <= remaining else { return .overrun }
            streamRemaining = remaining - count
            return .raw
        }
        return streamChunked ? .chunk : .raw
    }

    enum StreamEnd: Equatable {
        case notStreaming
        /// Fewer bytes than announced: only closing tells the client the body is incomplete.
        case truncated
        /// Write the last chunk when `writeTerminator`, then `responseFinished(keepAlive:)`.
        case complete(writeTerminator: Bool, keepAlive: Bool)
    }

    mutating func streamFinished(draining: Bool) -> StreamEnd {
        guard phase == .streaming else { return .notStreaming }
        if let remaining = streamRemaining {
            streamRemaining = nil
            guard remaining == 0 else { return .truncated }
            phase = .handling
            return .complete(writeTerminator: false, keepAlive: !closeAfterResponse && !draining)
        }
        phase = .handling
        return .complete(writeTerminator: streamChunked, keepAlive: !closeAfterResponse && streamChunked && !draining)
    }

    /// The producer failed: true when the connection must close (its body cannot be completed).
    mutating func streamAborted() -> Bool {
        guard phase == .streaming else { return false }
        streamRemaining = nil
        return true
    }

    /// The whole response is queued. True: the connection waits for the next request (resume
    /// reading and process what is buffered); false: close once the output is flushed.
    mutating func responseFinished(keepAlive: Bool, now: NanoTime) -> Bool {
        current = nil
        guard keepAlive else {
            phase = .closing
            return false
        }
        phase = .idle
        deadline = now.adding(timeouts.idle)
        return true
    }

    // MARK: - Timeouts

    /// The write timeout is no write progress for `timeouts.write` while output is queued; the
    /// request deadline is the phase's own (`deadline`).
    mutating func checkTimeouts(now: NanoTime, pendingOutputBytes: Int, totalBytesWritten: UInt64) -> TimeoutDecision {
        if pendingOutputBytes == 0 {
            writeDeadline = nil
        } else if totalBytesWritten != writtenAtLastSweep || writeDeadline == nil {
            writtenAtLastSweep = totalBytesWritten
            writeDeadline = now.adding(timeouts.write)
        } else if let w = writeDeadline, now >= w {
            return .dropStalledReader
        }
        guard let d = deadline, now >= d else { return .none }
        deadline = nil
        switch phase {
        case .idle where !parser.isMidMessage:
            return .closeIdle
        case .idle, .readingHead, .readingBody:
            closeWithError()
            return .requestTimeout("request not received in time", failInbound: false)
        case .handling where bodyStreaming && pausedForInbound:
            deadline = now.adding(timeouts.body)  // waiting on our handler, not the client
            return .none
        case .handling where bodyStreaming:
            bodyStreaming = false
            closeWithError()
            return .requestTimeout("request content not received in time", failInbound: true)
        default:
            return .none
        }
    }
}
