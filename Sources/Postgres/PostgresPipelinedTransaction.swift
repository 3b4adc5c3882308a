/// A transaction block on one session that spends as few round trips as it can.
///
/// Statements whose results the caller does not need (`enqueue`) are held back and sent in one
/// pipeline (`PostgresConnection.pipeline`) together with the next statement whose result is needed
/// (`query`) — BEGIN rides with the first statement, and `commit(after:)` sends whatever is held,
/// the final statement and COMMIT as one pipeline. Statement order on the server is exactly the
/// order of the calls, so a transaction means the same as with one round trip per statement; only
/// *when* an error is reported moves: a held statement's failure is thrown by the next call that
/// talks to the server (the block is then aborted, and `withPipelinedTransaction` rolls it back).
///
/// Nothing is committed unless `commit(after:)` returns: its COMMIT is the last statement of its
/// pipeline, and the pipeline's results are only handed back once COMMIT's own result has arrived.
///
/// Held statements are sent early once they add up to `flushThreshold` bytes, so a bulk write never
/// buffers more than that much encoded SQL in memory.
///
/// Used by one task at a time (not `Sendable`): it lives inside one `withPipelinedTransaction` body.
public final class PostgresPipelinedTransaction {
    public let connection: PostgresConnection
    private var held: [PostgresQuery]
    private var heldBytes = 0
    /// True once something was sent (BEGIN went out, so a failure needs a ROLLBACK).
    private(set) var begun = false
    /// True once COMMIT succeeded.
    public private(set) var isCommitted = false
    public var flushThreshold = 8 << 20
    /// Statements held right now (BEGIN included until it is sent).
    var heldCount: Int { held.count }

    init(connection: PostgresConnection, isolation: PostgresIsolation) {
        self.connection = connection
        held = [PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation.rawValue)")]
    }

    /// Queues a statement whose result is not needed; it runs before anything queued later.
    public func enqueue(_ query: PostgresQuery) async throws {
        held.append(query)
        heldBytes += query.sql.utf8.count + query.binds.reduce(0) { $0 + ($1.bytes?.count ?? 0) }
        if heldBytes >= flushThreshold { try await flush() }
    }

    /// Sends everything held plus `query` in one round trip and returns `query`'s result.
    public func query(_ query: PostgresQuery) async throws -> PostgresResult {
        try await send([query])[0]
    }

    /// Sends everything held now (one round trip), e.g. to learn whether it succeeded.
    public func flush() async throws {
        if held.isEmpty { return }
        _ = try await send([])
    }

    /// `COPY … FROM STDIN` inside the block: sends what is held (one round trip, skipped when
    /// nothing is), then streams `data` (libpq cannot pipeline a COPY). Its errors surface here.
    public func copyIn(_ query: PostgresQuery, data: [UInt8]) async throws {
        guard !isCommitted else { throw PostgresError.protocolViolation("the transaction has already committed") }
        try await flush()
        _ = try await connection.copyIn(query, data: data)
    }

    /// A streamed `COPY … FROM STDIN` inside the block (`PostgresConnection.copyIn(_:from:)`):
    /// sends what is held first. If `next` throws, the block is aborted and this throws its error.
    public func copyIn(_ query: PostgresQuery, from next: @escaping PostgresConnection.CopySource) async throws {
        guard !isCommitted else { throw PostgresError.protocolViolation("the transaction has already committed") }
        try await flush()
        _ = try await connection.copyIn(query, from: next)
    }

    /// Sends what is held, then `last` (if any), then COMMIT, in one round trip; returns `last`'s
    /// result once COMMIT has succeeded.
    @discardableResult
    public func commit(after last: PostgresQuery? = nil) async throws -> PostgresResult? {
        var tail: [PostgresQuery] = []
        if let last { tail.append(last) }
        tail.append("COMMIT")
        let results = try await send(tail)
        // COMMIT in an already failed block answers ROLLBACK without an error: never take that as durable.
        guard results.last?.commandTag == "COMMIT" else {
            throw PostgresError.protocolViolation("COMMIT answered \(results.last?.commandTag ?? "nothing"): the transaction was rolled back")
        }
        isCommitted = true
        return last == nil ? nil : results[0]
    }

    /// Sends what is held, then `last` in order, then COMMIT, in one round trip; returns the
    /// results of `last` once COMMIT has succeeded.
    public func commit(afterAll last: [PostgresQuery]) async throws -> [PostgresResult] {
        let results = try await send(last + ["COMMIT"])
        guard results.last?.commandTag == "COMMIT" else {
            throw PostgresError.protocolViolation("COMMIT answered \(results.last?.commandTag ?? "nothing"): the transaction was rolled back")
        }
        isCommitted = true
        return Array(results.dropLast())
    }

    /// Sends held statements followed by `tail`; returns the results of `tail` only.
    private func send(_ tail: [PostgresQuery]) async throws -> [PostgresResult] {
        guard !isCommitted else { throw PostgresError.protocolViolation("the transaction has already committed") }
        let batch = held + tail
        held = []
        heldBytes = 0
        begun = true
        let results = try await connection.pipeline(batch)
        guard results.count == batch.count else {
            throw PostgresError.protocolViolation("pipeline returned \(results.count) results for \(batch.count) statements")
        }
        return Array(results.suffix(tail.count))
    }
}

extension PostgresPool {
    /// Runs `body` in a `PostgresPipelinedTransaction` on one session. If `body` returns without
    /// committing, whatever is held is sent with COMMIT. Any error rolls back. Serialization
    /// failures and deadlocks rerun `body` (as `withTransaction` does), so it must be safe to rerun.
    public func withPipelinedTransaction<R>(
        isolation: PostgresIsolation = .readCommitted,
        maxAttempts: Int = 5,
        _ body: (PostgresPipelinedTransaction) async throws -> R
    ) async throws -> R {
        try await withConnectionRetryingTransientFailures(maxAttempts: maxAttempts) { conn in
            let tx = PostgresPipelinedTransaction(connection: conn, isolation: isolation)
            do {
                let r = try await body(tx)
                if !tx.isCommitted { try await tx.commit() }
                return r
            } catch {
                if tx.begun && !tx.isCommitted && !conn.isBroken { _ = try? await conn.query("ROLLBACK") }
                throw error
            }
        }
    }
}
