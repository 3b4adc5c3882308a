import DQL
import Postgres
import Synchronization
import Values

/// Bounds on reads whose result may be large (docs/STORAGE.md, "Large results").
public struct ReadLimits: Sendable {
    /// The most stored-JSON bytes of documents a read may hold at once when it cannot stream:
    /// ORDER BY, GROUP BY, aggregates or DISTINCT left to memory, and responses that need the
    /// whole result first (CBOR). Past it the read fails with 400 ("result too large …").
    public var maxBufferedResultBytes = 64 << 20
    /// A read first asks PostgreSQL for at most this many rows plus one, with the statement's
    /// prepared plan (one round trip, as small results always were). If more come back, the
    /// read is repeated through a cursor, a batch at a time. With documents of at most 5 MiB
    /// this bounds what a read holds before it streams.
    public var probeRows = 64
    /// About this many stored-JSON bytes of documents per FETCH: the first FETCH asks for
    /// `firstBatchRows`, later ones for as many rows as the documents so far suggest, between
    /// `minBatchRows` and `maxBatchRows`. A batch is decoded, evaluated and serialized on an event
    /// loop in one go, so it is also the longest slice of loop time a stream takes at once.
    public var batchBytes = 512 << 10
    public var firstBatchRows = 32
    public var minBatchRows = 4
    public var maxBatchRows = 8192
    /// Streamed reads open at once. Each holds a pooled session for as long as its reader takes
    /// (a reader that trickles keeps the HTTP write timeout from firing), so they get a share of
    /// the pool, not all of it; past it a read that would stream gets 503 + Retry-After.
    public var maxConcurrentStreams = 8

    public init() {}
}

/// How a SELECT may answer: `.complete` holds the whole result; `.streaming` hands out its rows
/// a batch at a time (`SelectCursor.next`).
public enum ReadOutcome: Sendable {
    case complete(ExecuteResult)
    case streaming(SelectCursor)
}

/// Counts the streamed reads open at once (`ReadLimits.maxConcurrentStreams`).
final class StreamSlots: Sendable {
    private let inUse = Mutex(0)
    let limit: Int

    init(limit: Int) { self.limit = max(1, limit) }

    func tryAcquire() -> Bool {
        inUse.withLock { n in
            guard n < limit else { return false }
            n += 1
            return true
        }
    }

    func release() { inUse.withLock { $0 -= 1 } }

    var count: Int { inUse.withLock { $0 } }
}

/// A large SELECT read through a PostgreSQL cursor, one FETCH per `next()`:
///
///     BEGIN READ ONLY; DECLARE bp_select NO SCROLL CURSOR FOR <the read's SQL>; FETCH n   (one round trip)
///     FETCH n … (one per batch, only when the consumer asks: a slow HTTP reader stalls the FETCHes)
///     COMMIT                                                                               (at the end)
///
/// One statement, so one snapshot: every row carries the same transaction number (`transactionID`).
/// Holds one pooled session from creation until the end, an error, `close()`, or deinit (which
/// hands the session back still in its transaction: the pool then closes it rather than reuse it).
///
/// One consumer at a time: `next` takes the state out of the lock while it awaits the database
/// and puts it back after, so a second, concurrent `next` sees no session and ends.
public final class SelectCursor: Sendable {
    public let transactionID: Int64
    private let pool: PostgresPool
    private let limits: ReadLimits
    /// Each batch's in-memory stage (WHERE, projection) may run this long (as each FETCH may in
    /// PostgreSQL): `.timeout` (408) after, which ends the stream.
    private let statementTimeout: Duration?
    /// The stream slot this cursor holds, given back with its session.
    private let slot: StreamSlots?
    private let state: Mutex<State>

    struct State: Sendable {
        var connection: PostgresConnection?
        /// Rows fetched but not handed out yet (the first batch, fetched at open). They are
        /// decoded as they are handed out, within the batch's evaluation budget: off the loop
        /// when a batch is more than a loop's slice.
        var pending: PostgresResult?
        var pendingBytes = 0
        var exhausted = false
        var batchRows: Int
        /// The memory stage when the cursor streams result rows; nil when it yields documents.
        var stream: SelectStream?
    }

    static let cursorName = "bp_select"

    /// Opens the cursor on `connection` (leased by the caller) and fetches the first batch. From
    /// the call on, this object hands back the session and `slot` on every path, failures included.
    static func open(pool: PostgresPool, connection: PostgresConnection, slot: StreamSlots?, sql: String, binds: [PostgresBind],
                     limits: ReadLimits, stream: SelectStream?, statementTimeout: Duration? = nil) async throws -> SelectCursor {
        let rows = max(1, limits.firstBatchRows)
        let results: [PostgresResult]
        do {
            results = try await connection.pipeline([
                "BEGIN READ ONLY",
                PostgresQuery(unsafeSQL: "DECLARE \(cursorName) NO SCROLL CURSOR FOR " + sql, binds: binds),
                PostgresQuery(unsafeSQL: "FETCH \(rows) FROM \(cursorName)"),
            ])
        } catch {
            await Self.end(connection, pool: pool, slot: slot, commit: false)
            throw error
        }
        let first = results[2]
        let txn: Int64
        do {
            // The LEFT JOIN with the counter yields a row even when nothing matches.
            guard let row = first.first else { throw StoreError.corrupt("a cursor over the transaction counter returned no row") }
            txn = try row.decode(0, as: Int64.self)
        } catch {
            await Self.end(connection, pool: pool, slot: slot, commit: false)
            throw error
        }
        var state = State(connection: connection, batchRows: rows, stream: stream)
        Self.take(first, into: &state, limits: limits)
        return SelectCursor(transactionID: txn, pool: pool, limits: limits, statementTimeout: statementTimeout, slot: slot, state: state)
    }

    private init(transactionID: Int64, pool: PostgresPool, limits: ReadLimits, statementTimeout: Duration?, slot: StreamSlots?, state: State) {
        self.transactionID = transactionID
        self.pool = pool
        self.limits = limits
        self.statementTimeout = statementTimeout
        self.slot = slot
        self.state = Mutex(state)
    }

    deinit {
        // Abandoned (the response was never sent): the session is still inside the cursor's
        // transaction, so the pool closes it instead of reusing it.
        if let connection = state.withLock({ $0.connection }) {
            pool.release(connection)
            slot?.release()
        }
    }

    /// The next batch: result rows when the cursor streams, else documents. nil once the result
    /// is complete (the transaction is then committed and the session back in the pool). A batch
    /// may be empty (every document of it filtered out). Any error ends the cursor.
    public func next() async throws(StoreError) -> [Value]? {
        var s = state.withLock { s -> State in
            let taken = s
            s.connection = nil
            s.pending = nil
            return taken
        }
        do {
            let out = try await advance(&s)
            state.withLock { $0 = s }
            return out
        } catch {
            if let connection = s.connection { await Self.end(connection, pool: pool, slot: slot, commit: false) }
            throw StoreError.from(error)
        }
    }

    /// Stored-JSON bytes of the documents the last `next()` returned (for budgets).
    public var lastBatchBytes: Int { state.withLock { $0.pendingBytes } }

    /// Ends the cursor early (the client went away): rolls back and returns the session.
    public func close() async {
        let connection = state.withLock { s -> PostgresConnection? in
            let c = s.connection
            s.connection = nil
            return c
        }
        if let connection { await Self.end(connection, pool: pool, slot: slot, commit: false) }
    }

    private func advance(_ s: inout State) async throws -> [Value]? {
        guard let connection = s.connection else { return nil }
        if s.stream?.isDone == true { s.exhausted = true; s.pending = nil }
        if s.pending == nil && !s.exhausted {
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "FETCH \(s.batchRows) FROM \(Self.cursorName)"))
            Self.take(rows, into: &s, limits: limits)
        }
        if s.pending == nil && s.exhausted {
            s.connection = nil
            await Self.end(connection, pool: pool, slot: slot, commit: true)
            return nil
        }
        guard let rows = s.pending else { return [] }
        s.pending = nil
        let stream = s.stream
        // Inline while cheap, off the event loop when not (a large batch, a regex in the WHERE
        // over large documents): the same rule as every in-memory stage (`InMemoryEvaluation`).
        let deadline = statementTimeout.map { ContinuousClock.now + $0 }
        let (out, advanced) = try await InMemoryEvaluation.run(deadline: deadline) { budget -> ([Value], SelectStream?) in
            try budget.charge(DecodeCost.steps(rows, column: 1))
            var out: [Value] = []
            out.reserveCapacity(rows.count)
            guard let stream else {
                for row in rows where !row.isNull(1) { out.append(try DocumentStore.decodeJSON(row, column: 1)) }
                return (out, nil)
            }
            var running = stream.budgeted(budget)
            for row in rows where !row.isNull(1) {
                if running.isDone { break }
                if let item = try running.row(for: try DocumentStore.decodeJSON(row, column: 1)) { out.append(item) }
            }
            return (out, running.budgeted(nil))
        }
        s.stream = advanced
        return out
    }

    /// Keeps a FETCH's rows in `s.pending` and sizes the next FETCH from their bytes.
    private static func take(_ rows: PostgresResult, into s: inout State, limits: ReadLimits) {
        let (bytes, documents) = documentBytes(rows)
        if rows.count < s.batchRows { s.exhausted = true }
        s.pending = documents > 0 ? rows : nil
        s.pendingBytes = bytes
        if documents > 0 {
            let perRow = max(1, bytes / documents)
            s.batchRows = max(limits.minBatchRows, min(limits.maxBatchRows, limits.batchBytes / perRow))
        }
    }

    /// The stored-JSON bytes and the number of documents (non-null rows) of a read's rows
    /// (`SELECT t.n, q.value …`): what batch and second-probe sizes are computed from.
    static func documentBytes(_ rows: PostgresResult) -> (bytes: Int, documents: Int) {
        var bytes = 0, documents = 0
        for row in rows where !row.isNull(1) {
            bytes += row.withRawValue(1) { $0?.count ?? 0 }
            documents += 1
        }
        return (bytes, documents)
    }

    /// COMMIT (or ROLLBACK) and hand the session back; a failure here leaves the session in a
    /// transaction or broken, and the pool then closes it.
    private static func end(_ connection: PostgresConnection, pool: PostgresPool, slot: StreamSlots?, commit: Bool) async {
        if !connection.isBroken { _ = try? await connection.query(commit ? "COMMIT" : "ROLLBACK") }
        pool.release(connection)
        slot?.release()
    }
}
