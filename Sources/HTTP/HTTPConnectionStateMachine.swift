import Sockets

/// The decisions of one HTTP/1.1 server connection, with no I/O: which phase it is in, what the
/// parser's next event means, when a request may be dispatched, whether the connection stays
/// open after a response, and which timeout has run out. Every step that depends on time takes
/// `now`; `HTTPServerConnection` passes the loop's clock and carries out what the step returns,
/// tests pass a manual clock's value.
///
///     idle ──bytes──▶ readingHead ──head──▶ readingBody ──end──▶ handling ──response──▶ idle
///                          │                    │                   │ (stream) ▶ streaming ─▶ idle
///                          └─────── timeout: 408 + close ───────────┘           (or close)
///
/// A `.streaming` route skips `readingBody`: its handler starts at the head (`handling` with
/// `bodyStreaming` set) and the parser keeps feeding it content until the end of the message.
///
/// One deadline covers the request phase at hand (`timeouts.header` from the first byte,
/// `timeouts.body` from the head or, for streamed content, from the last piece, `timeouts.idle`
/// between requests); the write timeout is tracked apart. The loop's sweeper calls
/// `checkTimeouts(now:…)` for every connection rather than arming a timer per connection.
struct HTTPConnectionStateMachine {
    enum Phase { case idle, readingHead, readingBody, handling, streaming, closing, upgraded, closed }

    /// What the owner of the socket must do after `bytesReceived`.
    enum ReadDecision: Equatable {
        /// Run `next(now:outputBackpressured:)` until it says `.wait`.
        case process
        /// Pipelined bytes wait for the response; a full head's worth is waiting: stop reading.
        case pauseReading
        case none
    }

    /// The next thing the parser's input means (`next(now:outputBackpressured:)`).
    enum Step {
        /// Wait for more bytes (or for the running handler).
        case wait
        /// Our output is backpressured: stop reading until it drains.
        case pauseReading
        /// A request head: route it, then call `routed(bodyLimit:streaming:now:)`.
        case head(HTTPRequestHead)
        /// A piece of streamed content for the running `.streaming` handler.
        case content([UInt8])
        /// The streamed content is complete.
        case contentEnded
        /// A complete request for an ordinary route: the connection is now `handling` it.
        case dispatch(HTTPRequest)
        /// Answer `status` with `message` and close after it; fail the streamed content first
        /// when `failInbound` is set.
        case reject(HTTPParseError, failInbound: HTTPRequestBody.Failed.Reason?)
    }

    /// What the sweeper must do for this connection (`checkTimeouts`).
    enum TimeoutDecision: Equatable {
        case none
        /// The peer took none of our output for `timeouts.write`.
        case dropStalledReader
        /// Idle between requests for `timeouts.idle`: close without a word.
        case closeIdle
        /// 408 with this message, then close; fail the streamed content first when `failInbound`.
        case requestTimeout(String, failInbound: Bool)
    }

    let timeouts: HTTPServerConfiguration.Timeouts
    let maxHeaderBytes: Int
    let maxRequestsPerConnection: Int
    /// The server's body limit for ordinary routes; the parser admits up to `parserBodyLimit` at
    /// the head (the largest streaming route) and gets the matched route's limit for the content.
    let baseBodyLimit: Int
    let parserBodyLimit: Int

    // The state below is changed only by the steps in this file and in +Response; the owner reads it.
    var parser: HTTPParser
    var phase = Phase.idle
    /// When the request phase at hand times out (nil: no request deadline).
    var deadline: NanoTime?
    var writeDeadline: NanoTime?
    var writtenAtLastSweep: UInt64 = 0
    /// The head of the request being read or handled.
    var current: HTTPRequestHead?
    var requestsServed = 0
    /// Close once the response at hand is sent (the peer sent EOF, a drain began, or the request
    /// content was left unread).
    var closeAfterResponse = false
    /// True while a `.streaming` handler runs and its content is still arriving.
    var bodyStreaming = false
    /// Reading paused because the handler has `InboundBody.highWaterMark` bytes unread.
    var pausedForInbound = false
    /// The response body being streamed is chunked (HTTP/1.1) rather than close-delimited.
    var streamChunked = true
    /// Bytes a `.sizedStream` body still owes (nil for chunked or close-delimited streams).
    var streamRemaining: Int?

    init(configuration: HTTPServerConfiguration, largestStreamingBodyLimit: Int, now: NanoTime) {
        var limits = configuration.limits
        timeouts = configuration.timeouts
        maxHeaderBytes = limits.maxHeaderBytes
        maxRequestsPerConnection = configuration.maxRequestsPerConnection
        baseBodyLimit = limits.maxBodyBytes
        limits.maxBodyBytes = max(limits.maxBodyBytes, largestStreamingBodyLimit)
        parserBodyLimit = limits.maxBodyBytes
        parser = HTTPParser(kind: .request, limits: limits, aggregatesBody: true)
        deadline = now.adding(timeouts.header)
    }

    /// Between requests with nothing buffered and nothing left to send.
    func isIdle(pendingOutputBytes: Int) -> Bool { phase == .idle && !parser.isMidMessage && pendingOutputBytes == 0 }

    /// True while the parser's input is being turned into requests (or streamed content).
    var isReading: Bool { phase == .idle || phase == .readingHead || phase == .readingBody || bodyStreaming }

    // MARK: - Input

    mutating func bytesReceived(_ bytes: UnsafeRawBufferPointer) -> ReadDecision {
        parser.feed(bytes)
        switch phase {
        case .idle, .readingHead, .readingBody:
            return .process
        case .handling where bodyStreaming:
            return .process
        case .handling, .streaming:
            return parser.bufferedByteCount > maxHeaderBytes ? .pauseReading : .none
        case .closing, .upgraded, .closed:
            return .none
        }
    }

    /// The parser's next event, read as a step of the connection. Call while `isReading`.
    mutating func next(now: NanoTime, outputBackpressured: Bool) -> Step {
        while isReading {
            if outputBackpressured { return .pauseReading }
            let event: HTTPParserEvent
            do {
                event = try parser.next()
            } catch {
                return reject(error)
            }
            switch event {
            case .needMoreData:
                if phase == .idle && parser.isMidMessage {
                    phase = .readingHead
                    deadline = now.adding(timeouts.header)
                }
                return .wait
            case .requestHead(let head):
                current = head
                return .head(head)
            case .body(let piece):
                guard bodyStreaming else { continue }
                // Streamed content may take long in total (64 MiB on a slow link): the body
                // timeout counts from the last piece instead, so only a stalled client hits it.
                deadline = now.adding(timeouts.body)
                return .content(piece)
            case .end(let trailers):
                parser.limits.maxBodyBytes = parserBodyLimit
                if bodyStreaming {
                    bodyStreaming = false
                    parser.aggregatesBody = true
                    deadline = nil
                    return .contentEnded
                }
                guard let head = current else { return reject(.malformed(.truncated)) }
                let request = HTTPRequest(head: head, body: parser.takeBody(), trailers: trailers)
                beginHandling()
                deadline = nil
                return .dispatch(request)
            case .responseHead:
                continue  // not produced by a request parser
            }
        }
        return .wait
    }

    /// What `routed` decided for the head.
    enum Routed: Equatable {
        /// Go on; send `100 Continue` first when asked (RFC 9110 §10.1.1). A streaming route's
        /// handler starts now: the connection is `handling` it.
        case proceed(sendContinue: Bool)
        case reject(HTTPParseError)
    }

    /// The head from `.head` was matched to a route whose content may be `bodyLimit` bytes;
    /// `streaming`: a `.streaming` route, whose handler starts at the head.
    mutating func routed(bodyLimit: Int, streaming: Bool, now: NanoTime) -> Routed {
        guard let head = current else { return .reject(.malformed(.truncated)) }
        // The parser admitted the largest limit of any route; this route's applies (RFC 9110 §15.5.14).
        if let declared = head.headers["Content-Length"].flatMap({ Int($0) }), declared > bodyLimit {
            _ = reject(.contentTooLarge)
            return .reject(.contentTooLarge)
        }
        parser.limits.maxBodyBytes = bodyLimit
        var sendContinue = false
        if parser.isReadingBody {
            deadline = now.adding(timeouts.body)
            sendContinue = head.expectsContinue
        }
        if streaming {
            beginHandling()
            // Even without content the parser still reports the message's `.end`; it must be
            // consumed by this request (it ends the streamed content), not be mistaken for the
            // end of the next one.
            bodyStreaming = true
            parser.aggregatesBody = false
        } else if parser.isReadingBody {
            phase = .readingBody
        }
        return .proceed(sendContinue: sendContinue)
    }

    /// Whether the request just routed has content still to read (asked after `routed`).
    var readsContent: Bool { parser.isReadingBody }

    /// Content bytes of the current request received so far (what its aggregated body holds).
    var contentBytesReceived: Int { parser.bodyBytesReceived }

    /// The streamed content's reader has `InboundBody.highWaterMark` bytes unread: stop reading.
    mutating func inboundFull() { pausedForInbound = true }

    /// The reader took the unread content below the low-water mark: true when reading must
    /// resume (it was paused for the reader).
    mutating func inboundDrained() -> Bool {
        guard pausedForInbound else { return false }
        pausedForInbound = false
        return true
    }

    /// What to do at the peer's EOF.
    enum EOFDecision: Equatable {
        /// Close now, failing the streamed content first when `failInbound`.
        case close(failInbound: Bool)
        /// Answer what was asked, then close.
        case closeAfterResponse
    }

    mutating func peerClosed() -> EOFDecision {
        if bodyStreaming {
            // The upload is truncated: nothing sensible can be answered, and the handler must not
            // mistake the part it got for the whole.
            bodyStreaming = false
            return .close(failInbound: true)
        }
        switch phase {
        case .handling, .streaming:
            closeAfterResponse = true
            return .closeAfterResponse
        default:
            return .close(failInbound: false)  // idle, or the peer left mid-request: nothing to answer
        }
    }

    /// The output queue drained: true when reading must resume.
    mutating func outputDrained() -> Bool {
        writeDeadline = nil
        return phase == .idle || phase == .readingHead || phase == .readingBody || (bodyStreaming && !pausedForInbound)
    }

    /// The socket is closed; returns whether the connection had been upgraded (handed over).
    mutating func transportClosed() -> Bool {
        let wasUpgraded = phase == .upgraded
        phase = .closed
        bodyStreaming = false
        return wasUpgraded
    }

    /// Graceful shutdown: true to close now (idle); otherwise the connection closes after its response.
    mutating func drain(pendingOutputBytes: Int) -> Bool {
        if isIdle(pendingOutputBytes: pendingOutputBytes) { return true }
        closeAfterResponse = true
        return false
    }

    // MARK: - Internals

    private mutating func beginHandling() {
        phase = .handling
        requestsServed += 1
    }

    private mutating func reject(_ error: HTTPParseError) -> Step {
        var failInbound: HTTPRequestBody.Failed.Reason?
        if bodyStreaming {
            bodyStreaming = false
            failInbound = error == .contentTooLarge ? .tooLarge : .malformed
        }
        closeWithError()
        return .reject(error, failInbound: failInbound)
    }

    /// An error response goes out and the connection closes after it.
    mutating func closeWithError() {
        phase = .closing
        deadline = nil
    }
}
