import Sockets

// The two streaming paths of a server connection, on its loop: response bodies produced by a
// handler (`HTTPBodyWriter`), and request content consumed by a `.streaming` handler
// (`HTTPRequestBody`).
extension HTTPServerConnection {
    /// `HTTPRequestBody.next()`, on the loop.
    func inboundNext(generation: UInt64, resume: CheckedContinuation<[UInt8]?, any Error>) {
        guard inbound?.generation == generation else { return resume.resume(throwing: HTTPRequestBody.Failed(reason: .finished)) }
        inbound?.take(resume)
        if pausedForInbound, let buffered = inbound?.bufferedBytes, buffered < InboundBody.lowWaterMark {
            pausedForInbound = false
            if !tcp.isBackpressured { tcp.resumeReading() }
            processBuffered()
        }
    }

    // MARK: - Streaming (called by HTTPBodyWriter on the loop)

    func streamWrite(_ bytes: [UInt8], resume: CheckedContinuation<Void, any Error>) {
        guard phase == .streaming, !tcp.isClosed else { return resume.resume(throwing: HTTPBodyWriter.Closed()) }
        if let remaining = streamRemaining {
            // More than the announced Content-Length would corrupt the framing of the next response.
            guard bytes.count <= remaining else {
                tcp.close()
                return resume.resume(throwing: HTTPBodyWriter.Closed())
            }
            streamRemaining = remaining - bytes.count
            tcp.write(bytes)
        } else if streamChunked {
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
        context.shared.notePeakQueuedOutput(tcp.peakPendingOutputBytes)
        if tcp.isBackpressured {
            streamWaiter = resume
        } else {
            resume.resume()
        }
    }

    func streamFinish() {
        guard phase == .streaming, !tcp.isClosed else { return }
        if let remaining = streamRemaining {
            streamRemaining = nil
            // Fewer bytes than announced: only closing tells the client the body is incomplete.
            guard remaining == 0 else { return tcp.close() }
            phase = .handling
            return completeResponse(keepAlive: !closeAfterResponse && !context.draining)
        }
        if streamChunked { tcp.write(Array("0\r\n\r\n".utf8)) }
        phase = .handling
        completeResponse(keepAlive: !closeAfterResponse && streamChunked && !context.draining)
    }

    func streamAbort() {
        guard phase == .streaming else { return }
        streamRemaining = nil
        tcp.close()
    }
}
