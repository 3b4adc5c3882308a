import Logging
import Sockets

/// One HTTP/1.1 connection on the server: feeds the parser, runs handlers one request at a time
/// (so pipelined responses leave in request order), writes responses, enforces timeouts.
/// Loop-owned: every method runs on `tcp.loop`.
///
///     idle ──bytes──▶ readingHead ──head──▶ readingBody ──end──▶ handling ──response──▶ idle
///                          │                    │                   │ (stream) ▶ streaming ─▶ idle
///                          └─────── timeout: 408 + close ───────────┘           (or close)
final class HTTPServerConnection: ConnectionDelegate {
    enum Phase { case idle, readingHead, readingBody, handling, streaming, closing, upgraded, closed }

    let context: HTTPLoopContext
    let tcp: TCPConnection
    private var parser: HTTPParser
    private(set) var phase = Phase.idle
    private var deadline: NanoTime?
    private var writeDeadline: NanoTime?
    private var writtenAtLastSweep: UInt64 = 0
    private var current: HTTPRequestHead?
    private var currentID: (loop: Int, number: UInt64) = (0, 0)
    private var started = NanoTime.now()
    private var requestsServed = 0
    private var closeAfterResponse = false
    private var inProcessLoop = false
    private var streamWaiter: CheckedContinuation<Void, any Error>?
    private var streamChunked = true
    private lazy var remote: String? = tcp.remoteAddress?.description

    private static let continue100: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    init(context: HTTPLoopContext, tcp: TCPConnection) {
        self.context = context
        self.tcp = tcp
        parser = HTTPParser(kind: .request, limits: context.shared.configuration.limits, aggregatesBody: true)
        deadline = NanoTime.now().adding(context.shared.configuration.timeouts.header)
    }

    var isIdle: Bool { phase == .idle && !parser.isMidMessage && tcp.pendingOutputBytes == 0 }

    // MARK: - ConnectionDelegate

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        parser.feed(bytes)
        switch phase {
        case .idle, .readingHead, .readingBody:
            processBuffered()
        case .handling, .streaming:
            // Pipelined bytes wait; stop reading once a full head's worth is waiting.
            if parser.bufferedByteCount > context.shared.configuration.limits.maxHeaderBytes { tcp.pauseReading() }
        case .closing, .upgraded, .closed:
            break
        }
    }

    func connectionDidReadEOF(_ connection: TCPConnection) {
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
        if phase == .idle || phase == .readingHead || phase == .readingBody {
            tcp.resumeReading()
            processBuffered()
        }
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        let wasUpgraded = phase == .upgraded
        phase = .closed
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

    private func processBuffered() {
        guard !inProcessLoop else { return }
        inProcessLoop = true
        defer { inProcessLoop = false }
        while phase == .idle || phase == .readingHead || phase == .readingBody {
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
                if parser.isReadingBody {
                    phase = .readingBody
                    deadline = NanoTime.now().adding(context.shared.configuration.timeouts.body)
                    if head.expectsContinue { tcp.write(Self.continue100) }  // RFC 9110 §10.1.1
                }
            case .end(let trailers):
                guard let head = current else { return reject(.malformed(.truncated)) }
                var request = HTTPRequest(head: head, body: parser.takeBody(), trailers: trailers)
                dispatch(&request)
            case .body, .responseHead:
                continue  // not produced by an aggregating request parser
            }
        }
    }

    private func dispatch(_ request: inout HTTPRequest) {
        phase = .handling
        deadline = nil
        started = NanoTime.now()
        requestsServed += 1
        currentID = context.nextRequestID()
        request.sequence = currentID
        request.remoteAddress = remote
        switch context.shared.router.match(request.method, path: request.path) {
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

    /// Sends the handler's answer and moves to the next request.
    func finish(_ result: HTTPHandlerResult) {
        guard phase == .handling, let head = current else { return }
        let config = context.shared.configuration
        var keepAlive = head.keepAlive && !closeAfterResponse && !context.draining && requestsServed < config.maxRequestsPerConnection
        switch result {
        case .upgrade(let response, let upgrade):
            tcp.writeInPlace { out in
                ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                         framing: .none, keepAlive: true, date: context.date, serverName: context.serverName,
                                         passConnectionHeader: true)
            }
            log(head, response.status, bytes: 0)
            phase = .upgraded
            context.remove(self)
            let leftover = parser.takeBufferedBytes()
            tcp.delegate = nil
            upgrade.takeOver(tcp, leftover)
        case .response(let response):
            let bodyAllowed = head.method != .HEAD && !response.status.forbidsBody
            switch response.body {
            case .bytes(let bytes):
                let framing: ResponseHeadWriter.Framing = response.status.forbidsBody ? .none : .length(bytes.count)
                let inline = bodyAllowed && bytes.count < OutputQueueCopyThreshold.value
                tcp.writeInPlace { out in
                    ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                             framing: framing, keepAlive: keepAlive, date: context.date, serverName: context.serverName)
                    if inline { out.append(contentsOf: bytes) }
                }
                if bodyAllowed && !inline { tcp.write(bytes) }
                log(head, response.status, bytes: bodyAllowed ? bytes.count : 0)
                completeResponse(keepAlive: keepAlive)
            case .stream(let producer):
                streamChunked = head.version == .http1_1
                if !streamChunked { keepAlive = false }  // HTTP/1.0: the close ends the body
                tcp.writeInPlace { out in
                    ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                             framing: bodyAllowed ? (streamChunked ? .chunked : .untilClose) : .none,
                                             keepAlive: keepAlive, date: context.date, serverName: context.serverName)
                }
                log(head, response.status, bytes: -1)
                guard bodyAllowed else { return completeResponse(keepAlive: keepAlive) }
                closeAfterResponse = !keepAlive
                phase = .streaming
                let writer = HTTPBodyWriter(connection: LoopBound(self, loop: tcp.loop))
                Task(executorPreference: tcp.loop) {
                    do {
                        try await producer(writer)
                        writer.finish()
                    } catch {
                        writer.abort()
                    }
                }
            }
        }
    }

    private func completeResponse(keepAlive: Bool) {
        current = nil
        guard keepAlive else {
            phase = .closing
            tcp.closeAfterFlush()
            return
        }
        phase = .idle
        deadline = NanoTime.now().adding(context.shared.configuration.timeouts.idle)
        tcp.resumeReading()
        processBuffered()
    }

    // MARK: - Streaming (called by HTTPBodyWriter on the loop)

    func streamWrite(_ bytes: [UInt8], resume: CheckedContinuation<Void, any Error>) {
        guard phase == .streaming, !tcp.isClosed else { return resume.resume(throwing: HTTPBodyWriter.Closed()) }
        if streamChunked {
            let inline = bytes.count < OutputQueueCopyThreshold.value
            tcp.writeInPlace { out in
                ResponseHeadWriter.appendHex(bytes.count, to: &out)
                out.append(contentsOf: ResponseHeadWriter.crlf)
                if inline {
                    out.append(contentsOf: bytes)
                    out.append(contentsOf: ResponseHeadWriter.crlf)
                }
            }
            if !inline {
                tcp.write(bytes)
                tcp.write(ResponseHeadWriter.crlf)
            }
        } else {
            tcp.write(bytes)
        }
        if tcp.isClosed { return resume.resume(throwing: HTTPBodyWriter.Closed()) }
        if tcp.isBackpressured {
            streamWaiter = resume
        } else {
            resume.resume()
        }
    }

    func streamFinish() {
        guard phase == .streaming, !tcp.isClosed else { return }
        if streamChunked { tcp.write(Array("0\r\n\r\n".utf8)) }
        phase = .handling
        completeResponse(keepAlive: !closeAfterResponse && streamChunked && !context.draining)
    }

    func streamAbort() {
        guard phase == .streaming else { return }
        tcp.close()
    }

    // MARK: - Errors, timeouts, shutdown

    private func reject(_ error: HTTPParseError) {
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
        default:
            break
        }
    }

    /// Graceful shutdown: idle connections close now; busy ones close after their response.
    func beginDrain() {
        if isIdle { tcp.close() } else { closeAfterResponse = true }
    }

    private func log(_ head: HTTPRequestHead, _ status: HTTPStatus, bytes: Int) {
        let logger = context.logger
        guard logger.logLevel <= .info else { return }
        let elapsed = NanoTime.now().duration(since: started)
        var request = HTTPRequest(head: head)
        request.sequence = currentID
        logger.info("request", metadata: [
            "method": "\(head.method)", "path": "\(head.path)", "status": "\(status.code)",
            "duration_us": "\(elapsed.components.attoseconds / 1_000_000_000_000 + elapsed.components.seconds * 1_000_000)",
            "bytes": "\(bytes)", "request_id": "\(request.requestID)", "peer": "\(remote ?? "?")",
        ])
    }
}

/// Bodies under this size are copied into the head's buffer (one write); larger ones are queued
/// as their own chunk (one writev, no copy).
enum OutputQueueCopyThreshold { static let value = 16 * 1024 }
