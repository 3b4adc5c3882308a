import Logging
import Sockets

/// One HTTP/1.1 connection on the server: feeds the parser, runs handlers one request at a time
/// (so pipelined responses leave in request order), writes responses, enforces timeouts.
/// Loop-owned: every method runs on `tcp.loop`.
///
///     idle ──bytes──▶ readingHead ──head──▶ readingBody ──end──▶ handling ──response──▶ idle
///                          │                    │                   │ (stream) ▶ streaming ─▶ idle
///                          └─────── timeout: 408 + close ───────────┘           (or close)
///
/// A `.streaming` route skips `readingBody`: its handler starts at the head (`handling` with
/// `bodyStreaming` set) and the parser keeps feeding it content until the end of the message.
final class HTTPServerConnection: ConnectionDelegate {
    enum Phase { case idle, readingHead, readingBody, handling, streaming, closing, upgraded, closed }

    let context: HTTPLoopContext
    let tcp: TCPConnection
    var parser: HTTPParser
    var phase = Phase.idle
    var deadline: NanoTime?
    private var writeDeadline: NanoTime?
    private var writtenAtLastSweep: UInt64 = 0
    var current: HTTPRequestHead?
    private(set) var currentID: (loop: Int, number: UInt64) = (0, 0)
    private(set) var started = NanoTime.now()
    private(set) var requestsServed = 0
    var closeAfterResponse = false
    private var inProcessLoop = false
    var streamWaiter: CheckedContinuation<Void, any Error>?
    var streamChunked = true
    /// Bytes a `.sizedStream` body still owes (nil for chunked or close-delimited streams).
    var streamRemaining: Int?
    lazy var remote: String? = tcp.remoteAddress?.description
    /// The streamed request body of the running `.streaming` handler, while it has one.
    var inbound: InboundBody?
    private var inboundGeneration: UInt64 = 0
    /// True while a `.streaming` handler runs and its content is still arriving.
    var bodyStreaming = false
    /// Reading paused because the handler has `InboundBody.highWaterMark` bytes unread.
    var pausedForInbound = false
    /// The route matched at the head, used when the content has arrived.
    private var currentMatch: HTTPRouter.Match?
    /// The server's body limit for ordinary routes; the parser admits up to `parserBodyLimit` at
    /// the head (the largest streaming route) and gets the matched route's limit for the content.
    private let baseBodyLimit: Int
    private let parserBodyLimit: Int

    private static let continue100: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    init(context: HTTPLoopContext, tcp: TCPConnection) {
        self.context = context
        self.tcp = tcp
        var limits = context.shared.configuration.limits
        baseBodyLimit = limits.maxBodyBytes
        limits.maxBodyBytes = max(limits.maxBodyBytes, context.shared.router.largestStreamingBodyLimit)
        parserBodyLimit = limits.maxBodyBytes
        parser = HTTPParser(kind: .request, limits: limits, aggregatesBody: true)
        deadline = NanoTime.now().adding(context.shared.configuration.timeouts.header)
    }

    var isIdle: Bool { phase == .idle && !parser.isMidMessage && tcp.pendingOutputBytes == 0 }

    // MARK: - ConnectionDelegate

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        parser.feed(bytes)
        switch phase {
        case .idle, .readingHead, .readingBody:
            processBuffered()
        case .handling where bodyStreaming:
            processBuffered()
        case .handling, .streaming:
            // Pipelined bytes wait; stop reading once a full head's worth is waiting.
            if parser.bufferedByteCount > context.shared.configuration.limits.maxHeaderBytes { tcp.pauseReading() }
        case .closing, .upgraded, .closed:
            break
        }
    }

    func connectionDidReadEOF(_ connection: TCPConnection) {
        if bodyStreaming {
            // The upload is truncated: nothing sensible can be answered, and the handler must not
            // mistake the part it got for the whole.
            bodyStreaming = false
            inbound?.fail(.disconnected)
            return tcp.close()
        }
        switch phase {
        case .handling, .streaming:
            closeAfterResponse = true  // answer what was asked, then close
        default:
            tcp.close()  // idle, or the peer left mid-request: nothing to answer
        }
    }

    func connectionDidDrain(_ connection: TCPConnection) {
        writeDeadline = nil
        if let waiter = streamWaiter {
            streamWaiter = nil
            waiter.resume()
        }
        if phase == .idle || phase == .readingHead || phase == .readingBody || (bodyStreaming && !pausedForInbound) {
            tcp.resumeReading()
            processBuffered()
        }
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        let wasUpgraded = phase == .upgraded
        if !wasUpgraded { context.shared.notePeakQueuedOutput(connection.peakPendingOutputBytes) }
        phase = .closed
        bodyStreaming = false
        inbound?.fail(.disconnected)
        if let waiter = streamWaiter {
            streamWaiter = nil
            waiter.resume(throwing: HTTPBodyWriter.Closed())
        }
        if !wasUpgraded { context.remove(self) }
        if let error, context.logger.logLevel <= .debug {
            context.logger.debug("connection closed", metadata: ["peer": "\(remote ?? "?")", "error": "\(error)"])
        }
    }

    // MARK: - Requests

    func processBuffered() {
        guard !inProcessLoop else { return }
        inProcessLoop = true
        defer { inProcessLoop = false }
        while phase == .idle || phase == .readingHead || phase == .readingBody || bodyStreaming {
            if tcp.isBackpressured {
                tcp.pauseReading()
                return
            }
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
                    deadline = NanoTime.now().adding(context.shared.configuration.timeouts.header)
                }
                return
            case .requestHead(let head):
                current = head
                let match = context.shared.router.match(head.method, path: head.path)
                let limit: Int
                if case .found(.streaming(let routeLimit, _), _) = match { limit = routeLimit } else { limit = baseBodyLimit }
                // The parser admitted the largest limit of any route; this route's applies (RFC 9110 §15.5.14).
                if let declared = head.headers["Content-Length"].flatMap({ Int($0) }), declared > limit {
                    return reject(.contentTooLarge)
                }
                parser.limits.maxBodyBytes = limit
                if parser.isReadingBody {
                    deadline = NanoTime.now().adding(context.shared.configuration.timeouts.body)
                    if head.expectsContinue { tcp.write(Self.continue100) }  // RFC 9110 §10.1.1
                }
                if case .found(.streaming(_, let body), let parameters) = match {
                    startStreaming(head, body, parameters)
                } else {
                    currentMatch = match
                    if parser.isReadingBody { phase = .readingBody }
                }
            case .body(let piece):
                guard bodyStreaming else { continue }
                // Streamed content may take long in total (64 MiB on a slow link): the body
                // timeout counts from the last piece instead, so only a stalled client hits it.
                deadline = NanoTime.now().adding(context.shared.configuration.timeouts.body)
                inbound?.deliver(piece)
                if let buffered = inbound?.bufferedBytes, buffered > InboundBody.highWaterMark {
                    pausedForInbound = true
                    tcp.pauseReading()
                    return
                }
            case .end(let trailers):
                parser.limits.maxBodyBytes = parserBodyLimit
                if bodyStreaming {
                    bodyStreaming = false
                    parser.aggregatesBody = true
                    deadline = nil
                    inbound?.end()
                    continue
                }
                guard let head = current else { return reject(.malformed(.truncated)) }
                var request = HTTPRequest(head: head, body: parser.takeBody(), trailers: trailers)
                dispatch(&request)
            case .responseHead:
                continue  // not produced by a request parser
            }
        }
    }

    private func beginHandling(_ request: inout HTTPRequest) {
        phase = .handling
        started = NanoTime.now()
        requestsServed += 1
        currentID = context.nextRequestID()
        request.sequence = currentID
        request.remoteAddress = remote
    }

    /// Starts a `.streaming` handler at the head; the content follows through `inbound`.
    private func startStreaming(_ head: HTTPRequestHead, _ body: @escaping @Sendable (HTTPRequest, HTTPRequestBody) async throws -> HTTPHandlerResult,
                                _ parameters: [String: String]) {
        var request = HTTPRequest(head: head)
        beginHandling(&request)
        request.pathParameters = parameters
        inboundGeneration &+= 1
        inbound = InboundBody(generation: inboundGeneration)
        let reader = HTTPRequestBody(connection: LoopBound(self, loop: tcp.loop), generation: inboundGeneration)
        // Even without content the parser still reports the message's `.end`; it must be consumed
        // here (it ends `inbound`), not left to be mistaken for the end of the next request.
        bodyStreaming = true
        parser.aggregatesBody = false
        runAsync({ try await body($0, reader) }, request)
    }

    private func dispatch(_ request: inout HTTPRequest) {
        beginHandling(&request)
        deadline = nil
        let match = currentMatch ?? context.shared.router.match(request.method, path: request.path)
        currentMatch = nil
        switch match {
        case .notFound:
            finish(.response(.error(.notFound, message: "no route for \(request.path)", requestID: request.requestID)))
        case .methodNotAllowed(let allow):
            var r = HTTPResponse.error(.methodNotAllowed, message: "method \(request.method) not allowed", requestID: request.requestID)
            r.headers.add("Allow", allow.map(\.rawValue).joined(separator: ", "))  // RFC 9110 §15.5.6
            finish(.response(r))
        case .found(let handler, let parameters):
            request.pathParameters = parameters
            switch handler {
            case .sync(let body):
                finish(body(request))
            case .async(let body):
                runAsync(body, request)
            case .streaming:
                break  // started at the head (startStreaming)
            }
        }
    }

    private func runAsync(_ body: @escaping @Sendable (HTTPRequest) async throws -> HTTPHandlerResult, _ request: HTTPRequest) {
        let me = LoopBound(self, loop: tcp.loop)
        let logger = context.logger
        Task(executorPreference: tcp.loop) {
            let result: HTTPHandlerResult
            do {
                result = try await body(request)
            } catch let e as HTTPError {
                result = .response(.error(e.status, message: e.message, requestID: request.requestID))
            } catch let e as HTTPRequestBody.Failed {
                // The connection was already answered or closed; this only matters if it was not.
                result = .response(.error(e.reason == .tooLarge ? .contentTooLarge : .badRequest, message: e.description, requestID: request.requestID))
            } catch {
                logger.error("handler failed", metadata: ["request_id": "\(request.requestID)", "error": "\(error)"])
                result = .response(.error(.internalServerError, message: "internal error", requestID: request.requestID))
            }
            if me.loop.inEventLoop {
                me.value.finish(result)
            } else {
                me.loop.execute { me.value.finish(result) }
            }
        }
    }

    // MARK: - Errors, timeouts, shutdown

    private func reject(_ error: HTTPParseError) {
        if bodyStreaming {
            bodyStreaming = false
            inbound?.fail(error == .contentTooLarge ? .tooLarge : .malformed)
        }
        let response = HTTPResponse.error(error.status, message: error.description)
        if context.logger.logLevel <= .info {
            context.logger.info("request rejected", metadata: ["peer": "\(remote ?? "?")", "status": "\(error.status.code)", "reason": "\(error)"])
        }
        sendErrorAndClose(response)
    }

    private func sendErrorAndClose(_ response: HTTPResponse) {
        guard case .bytes(let body) = response.body else { return }
        phase = .closing
        deadline = nil
        tcp.writeInPlace { out in
            ResponseHeadWriter.write(into: &out, version: .http1_1, status: response.status, headers: response.headers,
                                     framing: .length(body.count), keepAlive: false, date: context.date, serverName: context.serverName)
            out.append(contentsOf: body)
        }
        tcp.closeAfterFlush()
    }

    /// Called by the loop's sweeper.
    func checkTimeouts(now: NanoTime) {
        // Write timeout = no write progress for `timeouts.write` while output is queued.
        if tcp.pendingOutputBytes == 0 {
            writeDeadline = nil
        } else if tcp.totalBytesWritten != writtenAtLastSweep || writeDeadline == nil {
            writtenAtLastSweep = tcp.totalBytesWritten
            writeDeadline = now.adding(context.shared.configuration.timeouts.write)
        } else if let w = writeDeadline, now >= w {
            context.logger.info("dropping connection: peer not reading", metadata: ["peer": "\(remote ?? "?")", "queued": "\(tcp.pendingOutputBytes)"])
            return tcp.close()
        }
        guard let d = deadline, now >= d else { return }
        deadline = nil
        switch phase {
        case .idle where !parser.isMidMessage:
            tcp.close()
        case .idle, .readingHead, .readingBody:
            sendErrorAndClose(.error(.requestTimeout, message: "request not received in time"))
        case .handling where bodyStreaming && pausedForInbound:
            deadline = now.adding(context.shared.configuration.timeouts.body)  // waiting on our handler, not the client
        case .handling where bodyStreaming:
            bodyStreaming = false
            inbound?.fail(.timeout)
            sendErrorAndClose(.error(.requestTimeout, message: "request content not received in time"))
        default:
            break
        }
    }

    /// Graceful shutdown: idle connections close now; busy ones close after their response.
    func beginDrain() {
        if isIdle { tcp.close() } else { closeAfterResponse = true }
    }
}
