import Logging
import Metrics
import Sockets

/// One HTTP/1.1 connection on the server: moves bytes between the socket and its
/// `HTTPConnectionStateMachine` (which decides), runs handlers one request at a time (so
/// pipelined responses leave in request order), and writes responses.
/// Loop-owned: every method runs on `tcp.loop`, and so does every step of `machine`.
final class HTTPServerConnection: ConnectionDelegate {
    let context: HTTPLoopContext
    let tcp: TCPConnection
    var machine: HTTPConnectionStateMachine
    private(set) var currentID: (loop: Int, number: UInt64) = (0, 0)
    private(set) var started = NanoTime.now()
    private var inProcessLoop = false
    var streamWaiter: CheckedContinuation<Void, any Error>?
    lazy var remote: String? = tcp.remoteAddress?.description
    /// The streamed request body of the running `.streaming` handler, while it has one.
    var inbound: InboundBody?
    private var inboundGeneration: UInt64 = 0
    /// The route matched at the head, used when the content has arrived.
    private var currentMatch: HTTPRouter.Match?
    /// The route id (metrics label) of the request being handled.
    var currentRoute = 0
    /// `tcp.totalBytesWritten` already added to the loop's sent-bytes metric.
    var bytesWrittenReported: UInt64 = 0
    /// What the request being read or handled holds of the server's request-content budget
    /// (`HTTPServerShared.requestBudget`): the content received so far, charged as it
    /// arrives (a declared length costs nothing until it is sent), given back when the handler
    /// is done with it, or when the connection closes with no handler running.
    var heldRequestBytes = 0
    /// The current request's content is read whole before its handler runs (so it is charged).
    private var chargesContent = false
    /// A handler has the current request (its content is in memory until it returns).
    var handlerInFlight = false

    private static let continue100: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    init(context: HTTPLoopContext, tcp: TCPConnection) {
        self.context = context
        self.tcp = tcp
        machine = HTTPConnectionStateMachine(configuration: context.shared.configuration,
                                             largestStreamingBodyLimit: context.shared.router.largestStreamingBodyLimit, now: .now())
    }

    var isIdle: Bool { machine.isIdle(pendingOutputBytes: tcp.pendingOutputBytes) }

    // MARK: - ConnectionDelegate

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        context.metrics.bytes.addOwned(0, UInt64(bytes.count))
        switch machine.bytesReceived(bytes) {
        case .process: processBuffered()
        case .pauseReading: tcp.pauseReading()
        case .none: break
        }
    }

    func connectionDidReadEOF(_ connection: TCPConnection) {
        switch machine.peerClosed() {
        case .close(let failInbound):
            if failInbound { inbound?.fail(.disconnected) }
            tcp.close()
        case .closeAfterResponse:
            break
        }
    }

    func connectionDidDrain(_ connection: TCPConnection) {
        if let waiter = streamWaiter {
            streamWaiter = nil
            waiter.resume()
        }
        if machine.outputDrained() {
            tcp.resumeReading()
            processBuffered()
        }
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        let wasUpgraded = machine.transportClosed()
        if !wasUpgraded { reportBytesWritten() }
        if !wasUpgraded { context.shared.notePeakQueuedOutput(connection.peakPendingOutputBytes) }
        inbound?.fail(.disconnected)
        if !handlerInFlight { releaseRequestBytes() }  // else when the handler returns (`finish`)
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
        while true {
            let now = NanoTime.now()
            switch machine.next(now: now, outputBackpressured: tcp.isBackpressured) {
            case .wait:
                chargeContentReceived()
                return
            case .pauseReading:
                guard chargeContentReceived() else { return }
                return tcp.pauseReading()
            case .head(let head):
                let (match, route) = context.shared.router.matchRoute(head.method, path: head.path)
                currentRoute = route ?? context.shared.metrics.unmatchedRouteID
                var streaming: (limit: Int, body: @Sendable (HTTPRequest, HTTPRequestBody) async throws -> HTTPHandlerResult, parameters: [String: String])?
                if case .found(.streaming(let limit, let body), let parameters) = match { streaming = (limit, body, parameters) }
                switch machine.routed(bodyLimit: streaming?.limit ?? machine.baseBodyLimit, streaming: streaming != nil, now: now) {
                case .reject(let error):
                    return sendRejection(error)
                case .proceed(let sendContinue):
                    // Content read whole before the handler runs is held in memory: charged to the
                    // server's budget as it arrives (`chargeContentReceived`).
                    chargesContent = streaming == nil && machine.readsContent
                    if sendContinue { tcp.write(Self.continue100) }  // RFC 9110 §10.1.1
                }
                if let streaming {
                    startStreaming(head, streaming.body, streaming.parameters)
                } else {
                    currentMatch = match
                }
            case .content(let piece):
                inbound?.deliver(piece)
                if let buffered = inbound?.bufferedBytes, buffered > InboundBody.highWaterMark {
                    machine.inboundFull()
                    return tcp.pauseReading()
                }
            case .contentEnded:
                inbound?.end()
            case .dispatch(var request):
                if chargesContent {
                    chargesContent = false
                    guard chargeContent(upTo: request.body.count) else { return }
                }
                dispatch(&request)
            case .reject(let error, let failInbound):
                if let failInbound { inbound?.fail(failInbound) }
                return sendRejection(error)
            }
        }
    }

    /// Stamps a request the machine has started handling.
    private func beginHandling(_ request: inout HTTPRequest) {
        started = NanoTime.now()
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
        runAsync({ try await body($0, reader) }, request)
    }

    private func dispatch(_ request: inout HTTPRequest) {
        beginHandling(&request)
        handlerInFlight = true
        let match: HTTPRouter.Match
        if let matched = currentMatch {
            match = matched
        } else {
            let (found, route) = context.shared.router.matchRoute(request.method, path: request.path)
            match = found
            currentRoute = route ?? context.shared.metrics.unmatchedRouteID
        }
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
                // Every line logged while the handler runs carries the request's id.
                result = try await HTTPRequest.$currentLogID.withValue(request.logID) { try await body(request) }
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

    /// Answers a request the parser (or the route's limit) refused; the machine is `closing`.
    /// It gets a request id like any answered request (the client may not have sent a readable
    /// `X-Request-ID`: the head may be what was refused), so the answer and the log line match.
    private func sendRejection(_ error: HTTPParseError) {
        refuse(error.status, error.description, route: context.shared.metrics.unmatchedRouteID, level: .info,
               log: "request rejected", ["reason": "\(error)"])
    }

    /// Answers `status` with `message` (and `headers`) to a request that is not handled, with a
    /// request id of its own, its metric and log line, then closes the connection.
    private func refuse(_ status: HTTPStatus, _ message: String, headers: [(String, String)] = [], route: Int, level: Logger.Level,
                        log: Logger.Message, _ metadata: Logger.Metadata) {
        let id = context.nextRequestID()
        let requestID = "\(HTTPRequest.processTag)-\(id.loop)-\(id.number)"
        context.metrics.record(route: route, method: HTTPMethod("other"), status: status.code, elapsedNanoseconds: 0)
        if context.logger.logLevel <= level {
            context.logger.log(level: level, log, metadata: metadata.merging(
                ["peer": "\(remote ?? "?")", "request_id": "\(requestID)", "status": "\(status.code)"]) { a, _ in a })
        }
        var response = HTTPResponse.error(status, message: message, requestID: requestID)
        for (name, value) in headers { response.headers.add(name, value) }
        sendErrorAndClose(response)
    }

    /// Charges the content received so far of a request read whole; false (and the request
    /// refused, the connection closing) when the budget is spent.
    @discardableResult
    private func chargeContentReceived() -> Bool {
        guard chargesContent else { return true }
        return chargeContent(upTo: machine.contentBytesReceived)
    }

    private func chargeContent(upTo received: Int) -> Bool {
        let more = received - heldRequestBytes
        guard more > 0 else { return true }
        guard context.shared.requestBudget.take(more) else {
            chargesContent = false
            machine.closeWithError()
            refuseForMemory()
            return false
        }
        heldRequestBytes = received
        return true
    }

    /// 503 to a request whose content would go past the server's request-content budget
    /// (`maxBufferedRequestBytes`): nothing more of it is read; the client may send it again.
    private func refuseForMemory() {
        refuse(.serviceUnavailable, "the server holds as much request content as it may; retry shortly", headers: [("Retry-After", "1")],
               route: currentRoute, level: .notice, log: "request refused: request content in memory at its limit",
               ["limit": "\(context.shared.configuration.maxBufferedRequestBytes)"])
    }

    /// Gives back what the request held of the request-content budget (once).
    func releaseRequestBytes() {
        guard heldRequestBytes > 0 else { return }
        context.shared.requestBudget.give(heldRequestBytes)
        heldRequestBytes = 0
    }

    private func sendErrorAndClose(_ response: HTTPResponse) {
        guard case .bytes(let body) = response.body else { return }
        tcp.writeInPlace { out in
            ResponseHeadWriter.write(into: &out, version: .http1_1, status: response.status, headers: response.headers,
                                     framing: .length(body.count), keepAlive: false, date: context.date, serverName: context.serverName)
            out.append(contentsOf: body)
        }
        tcp.closeAfterFlush()
    }

    /// Called by the loop's sweeper.
    func checkTimeouts(now: NanoTime) {
        switch machine.checkTimeouts(now: now, pendingOutputBytes: tcp.pendingOutputBytes, totalBytesWritten: tcp.totalBytesWritten) {
        case .none:
            break
        case .dropStalledReader:
            context.logger.info("dropping connection: peer not reading", metadata: ["peer": "\(remote ?? "?")", "queued": "\(tcp.pendingOutputBytes)"])
            tcp.close()
        case .closeIdle:
            tcp.close()
        case .requestTimeout(let message, let failInbound):
            if failInbound { inbound?.fail(.timeout) }
            sendErrorAndClose(.error(.requestTimeout, message: message))
        }
    }

    /// Graceful shutdown: idle connections close now; busy ones close after their response.
    func beginDrain() {
        if machine.drain(pendingOutputBytes: tcp.pendingOutputBytes) { tcp.close() }
    }
}
