import Logging
import Metrics
import Sockets

// The response side of a server connection, on its loop: the handler's answer written with one
// write where it fits (head and small body together), the hand-over of an upgraded socket, the
// start of a streamed body, and the move to the next request. The streaming paths themselves
// are in HTTPServerConnection+Streams.swift.
extension HTTPServerConnection {
    /// Sends the handler's answer and moves to the next request.
    func finish(_ result: HTTPHandlerResult) {
        handlerInFlight = false
        releaseRequestBytes()  // the handler is done with the request's content (even if the connection closed)
        guard let (head, keepAliveAllowed) = machine.responseStarting(draining: context.draining) else { return }
        inbound?.fail(.finished)
        inbound = nil
        var keepAlive = keepAliveAllowed
        let requestID = HTTPRequest.LogID(head: head, sequence: currentID)
        switch result {
        case .upgrade(let response, let upgrade):
            tcp.writeInPlace { out in
                ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                         framing: .none, keepAlive: true, date: context.date, serverName: context.serverName,
                                         passConnectionHeader: true, requestID: requestID)
            }
            log(head, response.status, bytes: 0, requestID: requestID)
            let leftover = machine.upgraded()
            context.remove(self)
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
                                             framing: framing, keepAlive: keepAlive, date: context.date, serverName: context.serverName, requestID: requestID)
                    if inline { out.append(contentsOf: bytes) }
                }
                // Taken whole even past the output queue's drop limit (`WriteLimits.dropLimit`): a
                // large buffered body is the handler's choice, not a sign of a stalled reader.
                if bodyAllowed && !inline { tcp.write(bytes) }
                context.shared.notePeakQueuedOutput(tcp.peakPendingOutputBytes)
                log(head, response.status, bytes: bodyAllowed ? bytes.count : 0, requestID: requestID)
                completeResponse(keepAlive: keepAlive)
            case .stream(let producer):
                let chunked = head.version == .http1_1
                if !chunked { keepAlive = false }  // HTTP/1.0: the close ends the body
                tcp.writeInPlace { out in
                    ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                             framing: bodyAllowed ? (chunked ? .chunked : .untilClose) : .none,
                                             keepAlive: keepAlive, date: context.date, serverName: context.serverName, requestID: requestID)
                }
                log(head, response.status, bytes: -1, requestID: requestID)
                guard bodyAllowed else { return completeResponse(keepAlive: keepAlive) }
                machine.streamStarted(chunked: chunked, length: nil, keepAlive: keepAlive)
                startProducer(producer)
            case .sizedStream(let length, let producer):
                tcp.writeInPlace { out in
                    ResponseHeadWriter.write(into: &out, version: head.version, status: response.status, headers: response.headers,
                                             framing: response.status.forbidsBody ? .none : .length(length),
                                             keepAlive: keepAlive, date: context.date, serverName: context.serverName, requestID: requestID)
                }
                log(head, response.status, bytes: bodyAllowed ? length : 0, requestID: requestID)
                guard bodyAllowed, length > 0 else { return completeResponse(keepAlive: keepAlive) }
                machine.streamStarted(chunked: false, length: length, keepAlive: keepAlive)
                startProducer(producer)
            }
        }
    }

    private func startProducer(_ producer: @escaping @Sendable (HTTPBodyWriter) async throws -> Void) {
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

    func completeResponse(keepAlive: Bool) {
        guard machine.responseFinished(keepAlive: keepAlive, now: .now()) else { return tcp.closeAfterFlush() }
        tcp.resumeReading()
        processBuffered()
    }

    func log(_ head: HTTPRequestHead, _ status: HTTPStatus, bytes: Int, requestID: HTTPRequest.LogID) {
        // `Duration.components` is 128-bit arithmetic: taken once, for the metrics and the log line.
        let (seconds, attoseconds) = NanoTime.now().duration(since: started).components
        let nanoseconds = max(0, seconds) &* 1_000_000_000 &+ max(0, attoseconds / 1_000_000_000)
        context.metrics.record(route: currentRoute, method: head.method, status: status.code, elapsedNanoseconds: UInt64(nanoseconds))
        reportBytesWritten()
        if let accessLog = context.accessLog {
            return accessLog.append(.init(method: head.method, path: head.path, status: status.code, durationMicroseconds: Int(nanoseconds / 1_000),
                                          bytes: bytes, requestID: requestID, peer: remote ?? "?"))
        }
        switch context.shared.configuration.accessLog {
        case .off, .buffered:
            return
        case .logger:
            let logger = context.logger
            guard logger.logLevel <= .info else { return }
            logger.info("request", metadata: [
                "method": "\(head.method)", "path": "\(head.path)", "status": "\(status.code)",
                "duration_us": "\(nanoseconds / 1_000)",
                "bytes": "\(bytes)", "request_id": "\(requestID)", "peer": "\(remote ?? "?")",
            ])
        }
    }
}

extension HTTPServerConnection {
    /// Adds what the socket wrote since the last report to the loop's sent-bytes metric.
    func reportBytesWritten() {
        let total = tcp.totalBytesWritten
        context.metrics.bytes.addOwned(1, total &- bytesWrittenReported)
        bytesWrittenReported = total
    }
}

/// Bodies under this size are copied into the head's buffer (one write); larger ones are queued
/// as their own chunk (one writev, no copy).
enum OutputQueueCopyThreshold { static let value = 16 * 1024 }
