import CLibPQ

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

    /// Pushes COPY data to libpq in 64 KiB pieces, pausing whenever its buffer is full.
    func pumpCopyIn() {
        guard let pg, let current = op, case .copyIn(var offset) = current.phase else { return }
        let data = current.copyData ?? []
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
                current.phase = .copyIn(offset: offset)
                flush()
                return
            } else {
                markBroken(.connectionClosed(errorMessage()))
                return
            }
        }
        switch PQputCopyEnd(pg, nil) {
        case 1:
            current.phase = .results
            current.copyData = nil
            flush()
            drain()
        case 0:
            current.phase = .copyIn(offset: offset)
            flush()
        default:
            markBroken(.connectionClosed(errorMessage()))
        }
    }
}
