import CLibPQ
import Glibc
import Sockets

extension PostgresConnection {
    /// Moves COPY rows from libpq to the sink; false when it must wait for more input.
    func pumpCopyOut() -> Bool {
        guard let pg, let current = op else { return false }
        while true {
            var buf: UnsafeMutablePointer<CChar>?
            let n = PQgetCopyData(pg, &buf, 1)
            if n > 0, let buf {
                let chunk = UnsafeRawBufferPointer(start: buf, count: Int(n))
                current.copySink?(Array(chunk))
                PQfreemem(buf)
            } else if n == 0 {
                return false
            } else {
                current.phase = .results  // -1: done; -2: error reported by PQgetResult
                return true
            }
        }
    }

    /// Lets the socket hold up to `bytes` (at most 4 MiB, and at most what `net.core.wmem_max`
    /// allows) of COPY data. With the default send buffer (~200 KiB) PostgreSQL, which reads 8 KiB
    /// at a time, emptied it faster than this loop refilled it: a bulk INSERT's backend went to
    /// sleep waiting for data ~8 times per 2 MB chunk, and each refill waited for this loop's
    /// thread to be scheduled (docs/performance-history.md, "Session 6: bulk INSERT"). Raised once per
    /// session, and only by a COPY: sessions that never copy keep the default.
    func enlargeSendBuffer(for bytes: Int) {
        guard let pg else { return }
        let wanted = min(bytes, 4 << 20)
        guard wanted > sendBufferBytes, wanted > 256 << 10 else { return }
        var size = Int32(wanted)
        // Best effort: a refusal only leaves the default buffer, which works, just slower.
        if setsockopt(PQsocket(pg), SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size)) == 0 {
            sendBufferBytes = wanted
        }
    }

    /// Pushes COPY data to libpq in 64 KiB pieces, pausing whenever its buffer is full; for a
    /// streamed COPY, piece after piece as its source supplies them.
    func pumpCopyIn() {
        guard let pg, let current = op, case .copyIn(var offset) = current.phase else { return }
        var data = current.copyData ?? []
        while true {
            guard pushCopyData(pg, current, data, from: &offset) else { return }
            guard current.copySource != nil else { break }
            if current.copySourceError != nil {
                // Abandon the COPY: the server answers with an error, which `finish` replaces
                // with the source's own.
                current.copyData = nil
                current.phase = .results
                if PQputCopyEnd(pg, "the data source failed") != 1 { markBroken(.connectionClosed(errorMessage())); return }
                flush()
                drain()
                return
            }
            if let piece = current.copyFetched {
                // Backpressure: the next piece goes to libpq only once the previous one has left
                // for the socket (whose buffer `enlargeSendBuffer` sized for a piece).
                switch PQflush(pg) {
                case 0:
                    break
                case 1:
                    current.copyData = []
                    current.phase = .copyIn(offset: 0)
                    awaitWritable()
                    return
                default:
                    markBroken(.connectionClosed(errorMessage()))
                    return
                }
                current.copyFetched = nil
                data = piece
                offset = 0
                fetchCopyPiece(for: current)
                continue
            }
            if current.copySourceEnded { break }
            current.copyData = []
            current.phase = .copyIn(offset: 0)
            fetchCopyPiece(for: current)
            flush()
            return
        }
        switch PQputCopyEnd(pg, nil) {
        case 1:
            current.phase = .results
            current.copyData = nil
            flush()
            drain()
        case 0:
            current.copyData = []
            current.phase = .copyIn(offset: 0)
            awaitWritable()
        default:
            markBroken(.connectionClosed(errorMessage()))
        }
    }

    /// Runs the pump again once the socket takes more. Not `flush()`: it watches for writability
    /// only while libpq still holds output, and libpq may have sent the rest in the moment since
    /// the pump last asked — then no writable event would ever come and the COPY would wait
    /// forever (it did, once in a bulk INSERT benchmark). Epoll is level-triggered: a socket that
    /// is writable already reports it at once, and `onReady` flushes and pumps.
    private func awaitWritable() {
        do { try watch([.readable, .writable]) } catch { markBroken(.connectionClosed("\(error)")) }
    }

    /// Hands `data[offset...]` to libpq; false when it must wait (its buffer is full: the position
    /// is kept in the operation) or the session broke.
    private func pushCopyData(_ pg: OpaquePointer, _ current: Operation, _ data: [UInt8], from offset: inout Int) -> Bool {
        while offset < data.count {
            let end = min(offset + 65536, data.count)
            let r = data.withUnsafeBufferPointer { b in
                UnsafeRawPointer(b.baseAddress! + offset).withMemoryRebound(to: CChar.self, capacity: end - offset) {
                    PQputCopyData(pg, $0, Int32(end - offset))
                }
            }
            if r == 1 {
                offset = end
            } else if r == 0 {
                current.copyData = data
                current.phase = .copyIn(offset: offset)
                awaitWritable()
                return false
            } else {
                markBroken(.connectionClosed(errorMessage()))
                return false
            }
        }
        return true
    }

    /// Asks a streamed COPY's source for its next piece, unless a request is out or the source
    /// has ended or failed. The answer comes back to the loop (`copyPieceArrived`).
    func fetchCopyPiece(for current: Operation) {
        guard let source = current.copySource, !current.copyFetching, !current.copySourceEnded,
              current.copySourceError == nil, current.copyFetched == nil else { return }
        current.copyFetching = true
        let operation = LoopBound(current, loop: loop)
        Task(executorPreference: globalConcurrentExecutor) {
            let arrived: Result<[UInt8]?, any Error>
            do { arrived = .success(try await source()) } catch { arrived = .failure(error) }
            self.loop.execute { self.copyPieceArrived(operation.value, arrived) }
        }
    }

    /// A piece (or the end, or the source's failure) for `current`, on the loop. Dropped if the
    /// operation is over (the session broke meanwhile).
    private func copyPieceArrived(_ current: Operation, _ arrived: Result<[UInt8]?, any Error>) {
        current.copyFetching = false
        switch arrived {
        case .success(let piece?): current.copyFetched = piece
        case .success(nil): current.copySourceEnded = true
        case .failure(let error): current.copySourceError = error
        }
        guard op === current, case .copyIn = current.phase else { return }  // not yet in COPY: pumped when it is
        pumpCopyIn()
    }
}
