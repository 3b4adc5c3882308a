import Sockets

// The two streaming paths of a server connection, on its loop: response bodies produced by a
// handler (`HTTPBodyWriter`), and request content consumed by a `.streaming` handler
// (`HTTPRequestBody`).
extension HTTPServerConnection {
    /// `HTTPRequestBody.next()`, on the loop.
    func inboundNext(generation: UInt64, resume: CheckedContinuation<[UInt8]?, any Error>) {
        guard inbound?.generation == generation else { return resume.resume(throwing: HTTPRequestBody.Failed(reason: .finished)) }
        inbound?.take(resume)
        if let buffered = inbound?.bufferedBytes, buffered < InboundBody.lowWaterMark, machine.inboundDrained() {
            if !tcp.isBackpressured { tcp.resumeReading() }
            processBuffered()
        }
    }

    // MARK: - Streaming (called by HTTPBodyWriter on the loop)

    func streamWrite(_ bytes: [UInt8], resume: CheckedContinuation<Void, any Error>) {
        guard !tcp.isClosed else { return resume.resume(throwing: HTTPBodyWriter.Closed()) }
        switch machine.streamWrite(count: bytes.count) {
        case .notStreaming:
            return resume.resume(throwing: HTTPBodyWriter.Closed())
        case .overrun:
            tcp.close()
            return resume.resume(throwing: HTTPBodyWriter.Closed())
        case .raw:
            tcp.write(bytes)
        case .chunk:
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
        }
        if tcp.isClosed { return resume.resume(throwing: HTTPBodyWriter.Closed()) }
        context.shared.notePeakQueuedOutput(tcp.peakPendingOutputBytes)
        if tcp.isBackpressured {
            streamWaiter = resume
        } else {
            resume.resume()
        }
    }

    func streamFinish() {
        guard !tcp.isClosed else { return }
        switch machine.streamFinished(draining: context.draining) {
        case .notStreaming:
            break
        case .truncated:
            tcp.close()
        case .complete(let writeTerminator, let keepAlive):
            if writeTerminator { tcp.write(Array("0\r\n\r\n".utf8)) }
            completeResponse(keepAlive: keepAlive)
        }
    }

    func streamAbort() {
        if machine.streamAborted() { tcp.close() }
    }
}
