import CLibPQ
import Sockets

// Pipelining: several statements in one round trip (libpq pipeline mode, PostgreSQL 14+ libpq;
// "Pipeline Mode" in the libpq chapter of the PostgreSQL manual).
//
//     client ── Parse/Bind/Execute q1 ── Bind/Execute q2 ── … ── Sync ──────────▶ server
//     client ◀── result q1 ── result q2 ── … ── ReadyForQuery (PGRES_PIPELINE_SYNC) ── server
//
// Each statement yields its result and then a NULL from PQgetResult; the Sync yields
// PGRES_PIPELINE_SYNC, after which the session leaves pipeline mode again.
//
// Errors (protocol "Pipelining" section): after the first statement that fails, the server skips
// every later statement up to the Sync (libpq reports them as PGRES_PIPELINE_ABORTED). Outside a
// transaction block the statements form one implicit transaction that is rolled back; inside an
// explicit BEGIN the block is left in the failed state and the caller rolls back as after any
// failed statement. The call throws the first failure and returns no partial results.

extension PostgresConnection {
    /// Runs `queries` in order in one round trip and returns one result per query.
    ///
    /// Statements marked `prepared` are prepared in the same pipeline the first time this session
    /// sees their SQL. Throws the first statement's error (later statements did not run).
    public func pipeline(_ queries: [PostgresQuery]) async throws -> [PostgresResult] {
        if queries.isEmpty { return [] }
        return try await withUnsafeThrowingContinuation { (cont: UnsafeContinuation<[PostgresResult], any Error>) in
            if loop.inEventLoop {
                start(.pipeline(queries), .many(cont))
            } else {
                loop.execute { [self] in start(.pipeline(queries), .many(cont)) }
            }
        }
    }

    /// What a pipeline in flight has sent and received.
    struct PipelineState {
        /// One entry per command sent, in order: a Prepare (its result is not returned to the
        /// caller) or the caller's statement number.
        enum Slot {
            case prepare(name: String, sql: String)
            case query(Int)
        }
        var slots: [Slot] = []
        /// The slot whose results PQgetResult is delivering (each slot ends with a NULL result).
        var current = 0
        var results: [PostgresResult?]
        var error: PostgresError?
    }

    /// Enters pipeline mode and sends every statement plus a Sync; nil if libpq refused (the
    /// caller marks the session broken).
    func sendPipeline(_ queries: [PostgresQuery]) -> PipelineState? {
        guard let pg, PQenterPipelineMode(pg) == 1 else { return nil }
        var state = PipelineState(results: Array(repeating: nil, count: queries.count))
        var preparing: [String: String] = [:]
        for (i, q) in queries.enumerated() {
            var sent: Int32
            if q.prepared, let name = prepared[q.sql] ?? preparing[q.sql] {
                sent = sendPrepared(name, q)
            } else if q.prepared, prepared.count + preparing.count < Self.maxPreparedStatements {
                let name = "bp_\(nextPreparedID)"
                nextPreparedID += 1
                let types = q.binds.map { $0.type }
                sent = PQsendPrepare(pg, name, q.sql, Int32(types.count), types)
                state.slots.append(.prepare(name: name, sql: q.sql))
                preparing[q.sql] = name
                if sent == 1 { sent = sendPrepared(name, q) }
            } else {
                sent = sendParams(q)
            }
            guard sent == 1 else { return nil }
            state.slots.append(.query(i))
        }
        guard PQpipelineSync(pg) == 1 else { return nil }
        return state
    }

    /// Reads every result libpq has completed for the pipeline in flight; finishes it at the Sync.
    func drainPipeline() {
        guard let pg, let current = op, case .pipeline(var state) = current.phase else { return }
        // Take the state out of the operation while it is updated, so its arrays stay uniquely
        // referenced (no copy per result); every way out of the loop puts it back or ends the op.
        current.phase = .results
        defer { if op === current { current.phase = .pipeline(state) } }
        while PQisBusy(pg) == 0 {
            guard let res = PQgetResult(pg) else {
                state.current += 1  // NULL: the current statement's results are complete
                guard state.current <= state.slots.count else {
                    op = nil
                    current.completion.fail(PostgresError.protocolViolation("more pipeline results than statements"))
                    markBroken(.protocolViolation("more pipeline results than statements"))
                    return
                }
                continue
            }
            let status = PQresultStatus(res)
            if status == PGRES_PIPELINE_SYNC {
                PQclear(res)
                current.phase = .pipeline(state)
                op = nil
                guard PQexitPipelineMode(pg) == 1 else {
                    op = current
                    markBroken(.protocolViolation("could not leave pipeline mode: \(errorMessage())"))
                    return
                }
                finish(current)
                return
            }
            let slot = state.current < state.slots.count ? state.slots[state.current] : nil
            switch status {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
                switch slot {
                case .query(let i)?:
                    state.results[i] = PostgresResult(handle: res)
                case .prepare(let name, let sql)?:
                    prepared[sql] = name
                    PQclear(res)
                case nil:
                    PQclear(res)
                }
            case PGRES_FATAL_ERROR:
                if state.error == nil { state.error = .server(PostgresServerError(result: res)) }
                PQclear(res)
            default:
                PQclear(res)  // PGRES_PIPELINE_ABORTED (skipped after an error), notices
            }
        }
    }

    /// Hands the pipeline's results (or its first error) to the caller.
    func finishPipeline(_ state: PipelineState, _ completion: Completion) {
        guard case .many(let continuation) = completion else {
            completion.fail(PostgresError.protocolViolation("a pipeline finished a single statement"))
            return
        }
        if let error = state.error {
            continuation.resume(throwing: error)
            return
        }
        var out: [PostgresResult] = []
        out.reserveCapacity(state.results.count)
        for r in state.results {
            guard let r else {
                continuation.resume(throwing: PostgresError.protocolViolation("a pipelined statement returned no result"))
                return
            }
            out.append(r)
        }
        continuation.resume(returning: out)
    }
}

extension PostgresConnection {
    /// How many statements this session has prepared (read on its loop; for tests).
    func preparedCount() async -> Int {
        await withCheckedContinuation { (c: CheckedContinuation<Int, Never>) in
            loop.execute { [self] in c.resume(returning: prepared.count) }
        }
    }
}
