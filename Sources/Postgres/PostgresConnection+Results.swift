import CLibPQ
import Sockets
import Synchronization

extension PostgresConnection {
    // MARK: - Readiness

    func onReady(_ r: Readiness) {
        guard let pg else { return }
        if connectContinuation != nil {
            pollConnect(PQconnectPoll(pg))
            return
        }
        if r.isWritable && interest.contains(.writable) {
            if !flush() { return }
            if case .copyIn = op?.phase { pumpCopyIn() }
        }
        if r.isReadable {
            if PQconsumeInput(pg) == 0 {
                markBroken(.connectionClosed(errorMessage()))
                return
            }
            deliverNotifications()
            if op != nil { drain() }
        }
    }

    /// Sends what libpq has buffered; watches for writability while anything is left.
    /// Returns false if the session broke.
    @discardableResult
    func flush() -> Bool {
        guard let pg else { return false }
        switch PQflush(pg) {
        case 0:
            try? watch(.readable)
            return true
        case 1:
            do { try watch([.readable, .writable]) } catch { markBroken(.connectionClosed("\(error)")); return false }
            return true
        default:
            markBroken(.connectionClosed(errorMessage()))
            return false
        }
    }

    func deliverNotifications() {
        guard let pg else { return }
        while let n = PQnotifies(pg) {
            let note = PostgresNotification(
                channel: String(cString: n.pointee.relname),
                payload: String(cString: n.pointee.extra),
                backendPID: n.pointee.be_pid)
            PQfreemem(n)
            notificationHandler?(note)
        }
    }

    /// Starts `request` now; called on `loop` only.
    func start(_ request: Request, _ completion: Completion) {
        guard let pg, !isBroken else {
            completion.fail(PostgresError.connectionClosed("connection is not open"))
            return
        }
        guard op == nil else {
            completion.fail(PostgresError.protocolViolation("a statement is already running on this connection"))
            return
        }
        if let unsendable = request.unsendableError {
            completion.fail(unsendable)
            return
        }
        let newOp = Operation(completion: completion)
        let sent: Int32
        switch request {
        case .pipeline(let queries): lastStatement = queries.last?.sql ?? ""
        case .simple(let sql): lastStatement = sql
        case .statement(let q), .copyIn(let q, _), .copyInStream(let q, _), .copyOut(let q, _): lastStatement = q.sql
        }
        switch request {
        case .pipeline(let queries):
            guard let state = sendPipeline(queries) else {
                let e = PostgresError.connectionClosed(errorMessage())
                completion.fail(e)
                markBroken(e)
                return
            }
            newOp.phase = .pipeline(state)
            sent = 1
        case .simple(let sql):
            sent = sql.withCString { PQsendQuery(pg, $0) }
        case .statement(let q) where q.prepared:
            if let name = prepared[q.sql] {
                sent = sendPrepared(name, q)
            } else if prepared.count < Self.maxPreparedStatements {
                let name = "bp_\(nextPreparedID)"
                nextPreparedID += 1
                let types = q.binds.map { $0.type }
                sent = PQsendPrepare(pg, name, q.sql, Int32(types.count), types)
                newOp.phase = .preparing(name, q)
            } else {
                sent = sendParams(q)
            }
        case .statement(let q):
            sent = sendParams(q)
        case .copyIn(let q, let data):
            enlargeSendBuffer(for: data.count)
            sent = sendParams(q)
            newOp.copyData = data
        case .copyInStream(let q, let source):
            enlargeSendBuffer(for: 4 << 20)
            sent = sendParams(q)
            newOp.copyData = []
            newOp.copySource = source
        case .copyOut(let q, let sink):
            sent = sendParams(q)
            newOp.copySink = sink
        }
        guard sent == 1 else {
            let e = PostgresError.connectionClosed(errorMessage())
            completion.fail(e)
            markBroken(e)
            return
        }
        op = newOp
        flush()
        // The first piece is prepared while PostgreSQL sets the COPY up.
        if newOp.copySource != nil { fetchCopyPiece(for: newOp) }
    }

    // SQL text and names go to libpq through `withCString`, which lends a native string's own
    // NUL-terminated storage; passing a `String` where C wants a pointer copies it into a fresh
    // array on every call instead (seen in profiles).

    func sendParams(_ q: PostgresQuery) -> Int32 {
        q.sql.withCString { sql in
            withBindPointers(q.binds) { types, values, lengths, formats in
                PQsendQueryParams(pg, sql, Int32(q.binds.count), types, values, lengths, formats, q.binaryResults ? 1 : 0)
            }
        }
    }

    func sendPrepared(_ name: String, _ q: PostgresQuery) -> Int32 {
        name.withCString { name in
            withBindPointers(q.binds) { _, values, lengths, formats in
                PQsendQueryPrepared(pg, name, Int32(q.binds.count), values, lengths, formats, q.binaryResults ? 1 : 0)
            }
        }
    }

    /// Reads every result libpq has completed; finishes the operation on the final NULL result.
    func drain() {
        guard let pg else { return }
        while let current = op {
            switch current.phase {
            case .copyOut:
                if !pumpCopyOut() { return }
                continue
            case .copyIn:
                return  // driven by writability
            case .pipeline:
                drainPipeline()
                return
            default:
                break
            }
            if PQisBusy(pg) == 1 { return }
            guard let res = PQgetResult(pg) else {
                op = nil
                finish(current)
                return
            }
            switch PQresultStatus(res) {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                current.result = PostgresResult(handle: res)
            case PGRES_COPY_IN:
                PQclear(res)
                current.phase = .copyIn(offset: 0)
                pumpCopyIn()
                return
            case PGRES_COPY_OUT:
                PQclear(res)
                current.phase = .copyOut
            case PGRES_FATAL_ERROR:
                if current.error == nil { current.error = .server(PostgresServerError(result: res)) }
                PQclear(res)
            default:
                PQclear(res)  // notices and other non-final results
            }
        }
    }


    func finish(_ done: Operation) {
        if let pg { transactionStatus.store(UInt8(PQtransactionStatus(pg).rawValue), ordering: .releasing) }
        if case .pipeline(let state) = done.phase {
            finishPipeline(state, done.completion)
            return
        }
        guard case .one(let continuation) = done.completion else {
            done.completion.fail(PostgresError.protocolViolation("a single statement finished a pipeline"))
            return
        }
        if case .preparing(let name, let q) = done.phase {
            if let error = done.error {
                continuation.resume(throwing: error)
                return
            }
            prepared[q.sql] = name
            done.phase = .results
            done.result = nil
            guard sendPrepared(name, q) == 1 else {
                let e = PostgresError.connectionClosed(errorMessage())
                continuation.resume(throwing: e)
                markBroken(e)
                return
            }
            op = done
            flush()
            return
        }
        if let error = done.copySourceError {
            continuation.resume(throwing: error)  // the server's "COPY from stdin failed" only echoes it
        } else if let error = done.error {
            continuation.resume(throwing: error)
        } else if let result = done.result {
            continuation.resume(returning: result)
        } else {
            continuation.resume(throwing: PostgresError.protocolViolation("no result"))
        }
    }

    func markBroken(_ error: PostgresError) {
        broken.store(true, ordering: .releasing)
        if let current = op {
            op = nil
            current.completion.fail(error)
        }
        teardown()
        if let h = brokenHandler {
            brokenHandler = nil
            h(error)
        }
    }

    func teardown() {
        if let reg = registration { loop.deregister(reg) }
        registration = nil
        if let pg { PQfinish(pg) }
        pg = nil
        broken.store(true, ordering: .releasing)
    }

    func errorMessage() -> String {
        guard let pg, let m = PQerrorMessage(pg) else { return "no connection" }
        let s = String(cString: m).trimmingTrailingNewlines()
        return s.isEmpty ? "connection lost" : s
    }
}
