import CRDT
import DQL
import Postgres
import Synchronization
import Values

/// The document store: runs DQL statements against PostgreSQL.
///
/// - Reads (SELECT, SHOW, EXPLAIN) run directly on a pooled session: the pushdown planner's SQL in
///   one round trip (joined with the transaction counter, so the result carries the transaction
///   number it reflects), then the residual filter, sort, grouping and projection in memory.
/// - Writes (INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM) go through the `WriteBatcher`: concurrent
///   statements share one PostgreSQL transaction and one commit (group commit), each statement
///   still all-or-nothing. Every document write is read-merge-write of its CRDT state under a row
///   lock, with the materialized JSONB value updated in the same statement.
/// - DDL (CREATE/DROP INDEX) runs on its own, `CONCURRENTLY`, so writers are not blocked.
///
/// Thread-safety: all stored properties are immutable or behind a `Mutex`; `execute` may be called
/// from any task concurrently.
public final class DocumentStore: Sendable {
    public let pool: PostgresPool
    /// A loop of the pool's group, for work that talks to the store (its sessions then need no
    /// thread hop): what a caller without a loop of its own runs on.
    public var preferredExecutor: any TaskExecutor { pool.preferredLoop }
    /// `_id` compiles to `documents.id`: every live row's value holds its `_id` (INSERT sets it,
    /// nothing changes it), and tombstones (value NULL) are filtered out.
    let planner = PushdownPlanner(table: PushdownTable(name: "documents", unsafeExtraPredicate: "NOT \"deleted\"", idColumnMirrorsValueID: true))
    let replica: Mutex<Replica>
    /// Collections known to be registered (byte-exact names, as PostgreSQL keeps them apart).
    let knownCollections = Mutex<Set<ExactString>>([])
    /// `DQL_STRICT_MODE` as last read by a write transaction (see `RememberedSetting`).
    let rememberedStrictMode = Mutex<RememberedSetting?>(nil)
    let batcher: WriteBatcher
    /// Parsed statements by text (`parse`): REST clients repeat statements with new `args`.
    let statements = StatementCache(limits: DocumentStore.parseLimits)
    /// Reusable plans for `WHERE path = :param AND ...` reads.
    let equalityPlans = EqualityPlanCache()
    /// Point reads by string `_id` answered from memory; off until `changeFeed` starts, which
    /// alone keeps it valid.
    public let readCache: DocumentReadCache
    /// The instance's change feed: every commit of this store is handed to it once (`Committed`);
    /// the server starts it and has it follow the change log's notifications.
    public let changeFeed: ChangeFeed

    /// Parse limits for statements run through the store: 4 MiB, so one INSERT can carry 100k
    /// `(:dN)` documents (the request body limit bounds it too). The DQL default (256 KiB) stays
    /// for everything else, e.g. sync subscriptions.
    public static let parseLimits = DQLParseLimits(maxStatementBytes: 4 << 20)
    /// `_id`s generated for INSERTs without one come from here (tests may inject a deterministic one).
    /// Must never repeat an existing id: INSERT does not look generated ids up (a random 128-bit id
    /// cannot exist yet), which saves the lock round trip.
    let generateID: @Sendable () -> Value

    public let siteID: SiteID

    /// How long a statement's in-memory stage may run, counted from the stage's start, as
    /// PostgreSQL's `statement_timeout` counts each SQL statement (`bigpeer serve` gives both the
    /// same value): `.timeout` (408) after. Nil: no limit (library use, tests).
    public let statementTimeout: Duration?

    /// Opens the store on a migrated database (loads the database's CRDT site id).
    ///
    /// - Parameter readCacheBytes: memory for `readCache` (it still stays off until
    ///   `changeFeed.start()`).
    /// - Parameter readLimits: bounds on large reads (`ReadLimits`).
    /// - Parameter changeFeed: the change feed's ring and read sizes.
    public static func open(pool: PostgresPool, readCacheBytes: Int = 0, readLimits: ReadLimits = ReadLimits(),
                            statementTimeout: Duration? = nil, changeFeed: ChangeFeed.Limits = ChangeFeed.Limits()) async throws -> DocumentStore {
        let site = try await pool.query("SELECT site_id FROM bigpeer_identity")[0].decode(0, as: Int64.self)
        return DocumentStore(pool: pool, site: SiteID(UInt64(bitPattern: site)), readCacheBytes: readCacheBytes, readLimits: readLimits,
                             statementTimeout: statementTimeout, changeFeed: changeFeed)
    }

    /// INSERT documents evaluated (their expressions turned into values), counted where that
    /// happens (`evaluateInsertDocuments`): tests check that a statement's documents are
    /// evaluated once, group commit's look-ahead for the ids to lock included.
    let insertDocumentsEvaluated = Atomic<Int>(0)

    /// Bounds on large reads: the probe size, cursor batches, the in-memory budget.
    public let readLimits: ReadLimits
    /// Streamed reads open now (each holds a pooled session while its reader reads).
    let streamSlots: StreamSlots

    init(pool: PostgresPool, site: SiteID, readCacheBytes: Int = 0, readLimits: ReadLimits = ReadLimits(), statementTimeout: Duration? = nil,
         changeFeed: ChangeFeed.Limits = ChangeFeed.Limits(),
         generateID: @escaping @Sendable () -> Value = DocumentKey.generateID,
         gatherWindow: Duration = WriteBatcher.defaultGatherWindow) {
        self.pool = pool
        self.readLimits = readLimits
        self.statementTimeout = statementTimeout
        self.streamSlots = StreamSlots(limit: readLimits.maxConcurrentStreams)
        self.readCache = DocumentReadCache(capacityBytes: readCacheBytes)
        self.changeFeed = ChangeFeed(pool: pool, readCache: readCache, limits: changeFeed)
        self.siteID = site
        self.replica = Mutex(Replica(site: site))
        self.generateID = generateID
        self.batcher = WriteBatcher(gatherWindow: gatherWindow)
    }

    /// Runs one DQL statement with its named arguments.
    ///
    /// - Parameter minimumTransaction: `X-DITTO-TXN-ID`: wait (up to `transactionWait`) until the
    ///   database has committed that transaction number; `.unknownTransaction` if it never does.
    public func execute(_ text: String, arguments: [String: Value] = [:], minimumTransaction: Int64? = nil,
                        transactionWait: Duration = .seconds(5)) async throws(StoreError) -> ExecuteResult {
        let statement = try parse(text)
        return try await execute(statement, arguments: arguments, minimumTransaction: minimumTransaction, transactionWait: transactionWait)
    }

    /// Parses `text` (cached by text: see `StatementCache`) with `parseLimits`.
    public func parse(_ text: String) throws(StoreError) -> Statement {
        do { return try statements.statement(for: text) } catch { throw StoreError.syntax(error) }
    }

    /// Runs one already parsed statement (callers that inspect the statement first, e.g. to check
    /// permissions, parse once).
    ///
    /// A SELECT's whole result is held in memory, up to `readLimits.maxBufferedResultBytes` of
    /// documents (past it: `.resultTooLarge`, 400); `executeStreaming` answers larger ones.
    public func execute(_ statement: Statement, arguments: [String: Value] = [:], readRules: DocumentRules = .none,
                        writeRules: DocumentRules = .none,
                        minimumTransaction: Int64? = nil, transactionWait: Duration = .seconds(5)) async throws(StoreError) -> ExecuteResult {
        switch try await executeStreaming(statement, arguments: arguments, readRules: readRules, writeRules: writeRules,
                                          minimumTransaction: minimumTransaction, transactionWait: transactionWait, mayStream: false) {
        case .complete(let r): return r
        case .streaming(let cursor):  // never produced without `mayStream`
            await cursor.close()
            throw StoreError.invalid("internal: a buffered read produced a cursor")
        }
    }

    /// Runs one statement like `execute`, except that a SELECT whose result is larger than
    /// `readLimits.probeRows` rows and needs no sort, grouping or DISTINCT in memory comes back as
    /// a cursor (`.streaming`) when `mayStream`: its rows are read from PostgreSQL a batch at a
    /// time as the caller asks, so memory stays bounded whatever the result's size. Everything
    /// else comes back `.complete`.
    ///
    /// `readRules` (the caller's, docs/AUTH.md "Rules") are ANDed into the statement's WHERE
    /// (`DocumentRules.restricting`) before it is planned, so PostgreSQL applies them before any
    /// ORDER BY, OFFSET or LIMIT; a point read answered from `readCache` is checked against them.
    /// `writeRules` narrow the selection of UPDATE, DELETE and EVICT the same way, and every
    /// document a write produces must match them, else it fails whole with `.forbidden`
    /// (WriteRules.swift).
    public func executeStreaming(_ statement: Statement, arguments: [String: Value] = [:], readRules: DocumentRules = .none,
                                 writeRules: DocumentRules = .none, minimumTransaction: Int64? = nil, transactionWait: Duration = .seconds(5),
                                 mayStream: Bool = true) async throws(StoreError) -> ReadOutcome {
        do {
            let now = Int64(Replica.systemMillis())
            // The cache key comes from the statement as written: a rule does not make a point read another read.
            let pointRead: DocumentReadCache.Key?
            if case .select(let s) = statement { pointRead = Self.pointReadKey(s, arguments: arguments) } else { pointRead = nil }
            if let pointRead, let hit = cachedPointRead(pointRead, minimumTransaction: minimumTransaction, readRules: readRules, now: now) {
                return .complete(hit)
            }
            if let minimumTransaction { try await waitForTransaction(minimumTransaction, within: transactionWait) }
            if case .select(let s) = statement {
                return try await select(readRules.restricting(s), pointRead: pointRead, minimumTransaction: minimumTransaction,
                                       context: EvaluationContext(arguments: arguments, nowMilliseconds: now, budget: Self.planningBudget()),
                                       mayStream: mayStream)
            }
            return .complete(try await executeOther(writeRules.restrictingWrites(readRules.restricting(statement)), arguments: arguments,
                                                    writeRules: writeRules, now: now))
        } catch {
            throw StoreError.from(error)
        }
    }

    private func executeOther(_ statement: Statement, arguments: [String: Value], writeRules: DocumentRules, now: Int64) async throws -> ExecuteResult {
        switch statement {
        case .select:
            throw StoreError.invalid("internal: SELECT reached the non-read path")
        case .explain(let inner):
            let context = EvaluationContext(arguments: arguments, nowMilliseconds: now, strictMode: try await strictMode(),
                                            budget: Self.planningBudget())
            let text = try planner.explain(inner, context: context)
            return ExecuteResult(transactionID: try await currentTransaction(), queryType: "explain",
                                 items: [.object(["plan": .string(text)])])
        case .system(.show(let name)):
            return try await show(name)
        case .createIndex, .dropIndex:
            return try await runDDL(statement)
        case .insert, .update, .delete, .evict, .system:
            return try await batcher.submit(WriteBatcher.Job(work: .statement(statement, arguments), nowMillis: now, writeRules: writeRules),
                                            store: self)
        }
    }

    // MARK: - Reads

    /// For what planning evaluates on the caller's thread (LIMIT and OFFSET): a loop's share,
    /// then 400. (Constant folding has its own budget in the planner; the memory stage gets its
    /// own budget from `InMemoryEvaluation`.)
    static func planningBudget() -> EvaluationBudget {
        EvaluationBudget(maxSteps: InMemoryEvaluation.onLoopSteps)
    }

    /// The deadline of an in-memory stage starting now (nil: none).
    var inMemoryDeadline: ContinuousClock.Instant? { statementTimeout.map { ContinuousClock.now + $0 } }

    /// A SELECT in one prepared round trip when its result has at most `readLimits.probeRows`
    /// rows (point reads, counts and small results: the common case keeps its cost), else again
    /// through a cursor (`largeSelect`).
    func select(_ s: SelectStatement, pointRead: DocumentReadCache.Key?, minimumTransaction: Int64? = nil, context: EvaluationContext,
                mayStream: Bool) async throws -> ReadOutcome {
        let sql: String, binds: [PostgresBind], memory: SelectQuery
        // Point reads and other `path = :param` filters reuse their plan (EqualityPlanCache).
        if let cached = try equalityPlans.plan(s, context: context) {
            (sql, binds, memory) = (cached.sql, cached.binds.map(\.postgresBind), cached.memory)
        } else {
            let plan = try planner.plan(s, context: context)
            if plan.readsNoRow, let txn = readCache.reflectedTransaction(atLeast: minimumTransaction) {
                // A WHERE that folded to FALSE: PostgreSQL would return no row at any snapshot, so
                // the round trip is skipped (a flood of such reads costs no backend work).
                return .complete(try await rowlessResult(plan, transactionID: txn))
            }
            // LEFT JOIN LATERAL: one statement (one snapshot) yields the counter even with no rows.
            sql = "SELECT t.n, q.* FROM bigpeer_txn t LEFT JOIN LATERAL (" + plan.sql + ") q ON true"
            equalityPlans.record(s, plan: plan, wrappedSQL: sql, arguments: context.arguments)
            (binds, memory) = (plan.parameters.map(\.postgresBind), plan.memoryQuery)
            if case .count = plan.output {
                var query = PostgresQuery(unsafeSQL: sql, binds: binds)
                query.prepared = true
                let rows = try await pool.query(query)
                return .complete(ExecuteResult(transactionID: try rows[0].decode(0, as: Int64.self), queryType: "select",
                                               items: plan.countRows(try rows[0].decode(1, as: Int64.self))))
            }
        }
        // The SQL text depends only on the statement's shape (values are binds), so a session
        // prepares it once and skips PostgreSQL's parse and plan on every later request.
        let probeRows = readLimits.probeRows
        var query = PostgresQuery(unsafeSQL: pointRead == nil ? sql + " LIMIT \(probeRows + 1)" : sql, binds: binds)
        query.prepared = true
        let rows = try await pool.query(query)
        if pointRead != nil || rows.count <= probeRows {
            return .complete(try await documentsResult(rows, memory: memory, cacheAs: pointRead))
        }
        if let answered = try await limitReachedWithin(rows, memory: memory) { return .complete(answered) }
        if let rowsFitting = Self.secondProbeRows(rows, limits: readLimits) {
            // Small documents: ask once more for as many as one cursor batch would hold (one
            // snapshot, one round trip) before opening a cursor (five or more). The LIMIT is a
            // bind so the statement is prepared once whatever the count.
            var again = PostgresQuery(unsafeSQL: sql + " LIMIT $\(binds.count + 1)", binds: binds + [PostgresBind(type: PostgresType.int8, text: String(rowsFitting + 1))])
            again.prepared = true
            let more = try await pool.query(again)
            if more.count <= rowsFitting { return .complete(try await documentsResult(more, memory: memory, cacheAs: nil)) }
        }
        return try await largeSelect(sql: sql, binds: binds, memory: memory, mayStream: mayStream)
    }

    /// The answer of a plan that reads no row: COUNT's zero, else the memory stage over no
    /// documents (aggregates still yield their one row), under the usual budget.
    func rowlessResult(_ plan: PushdownPlan, transactionID: Int64) async throws -> ExecuteResult {
        if case .count = plan.output {
            return ExecuteResult(transactionID: transactionID, queryType: "select", items: plan.countRows(0))
        }
        let memory = plan.memoryQuery
        let items = try await InMemoryEvaluation.run(deadline: inMemoryDeadline) { budget in try memory.budgeted(budget).run([]) }
        return ExecuteResult(transactionID: transactionID, queryType: "select", items: items)
    }

    /// How many rows a second probe asks for after the first came back full: as many documents
    /// of the first probe's average size as `batchBytes` holds (at most `maxBatchRows`), the
    /// size the cursor's batches take too; nil when that is not several times the first probe
    /// (large documents: straight to the cursor).
    static func secondProbeRows(_ probe: PostgresResult, limits: ReadLimits) -> Int? {
        let (bytes, documents) = SelectCursor.documentBytes(probe)
        guard documents > 0 else { return nil }
        let rows = min(limits.maxBatchRows, limits.batchBytes / max(1, bytes / documents))
        return rows >= 4 * limits.probeRows ? rows : nil
    }

    /// The result when the probe's rows already hold all of it: a memory stage that streams and
    /// reaches its LIMIT within them (a residual WHERE kept the LIMIT out of the SQL) cannot be
    /// changed by the rows after them.
    func limitReachedWithin(_ rows: PostgresResult, memory: SelectQuery) async throws -> ExecuteResult? {
        guard memory.limit != nil, SelectStream(memory) != nil else { return nil }
        return try await InMemoryEvaluation.run(deadline: inMemoryDeadline) { budget -> ExecuteResult? in
            guard var stream = SelectStream(memory.budgeted(budget)) else { return nil }
            var items: [Value] = []
            for row in rows where !row.isNull(1) {
                try budget.charge(DecodeCost.steps(bytes: row.withRawValue(1) { $0?.count ?? 0 }))
                if let item = try stream.row(for: try Self.decodeJSON(row, column: 1)) { items.append(item) }
                if stream.isDone { return ExecuteResult(transactionID: try rows[0].decode(0, as: Int64.self), queryType: "select", items: items) }
            }
            return nil
        }
    }

    /// A read with more rows than the probe: through a cursor. Streamed when the memory stage
    /// allows it and the caller can take it; else collected within `maxBufferedResultBytes`.
    func largeSelect(sql: String, binds: [PostgresBind], memory: SelectQuery, mayStream: Bool) async throws -> ReadOutcome {
        let stream = mayStream ? SelectStream(memory) : nil
        var slot: StreamSlots?
        if stream != nil {
            guard streamSlots.tryAcquire() else {
                throw StoreError.busy("\(streamSlots.limit) large results are being streamed already; retry later")
            }
            slot = streamSlots
        }
        let connection: PostgresConnection
        do { connection = try await pool.acquire() } catch {
            slot?.release()
            throw error
        }
        let cursor = try await SelectCursor.open(pool: pool, connection: connection, slot: slot, sql: sql, binds: binds,
                                                 limits: readLimits, stream: stream, statementTimeout: statementTimeout)
        if stream != nil { return .streaming(cursor) }
        var documents: [Value] = []
        var held = 0
        while let batch = try await cursor.next() {
            held += cursor.lastBatchBytes
            if held > readLimits.maxBufferedResultBytes {
                await cursor.close()
                throw StoreError.resultTooLarge(Self.tooLargeMessage(memory, limit: readLimits.maxBufferedResultBytes))
            }
            documents.append(contentsOf: batch)
        }
        let collected = documents
        let items = try await InMemoryEvaluation.run(deadline: inMemoryDeadline) { budget in try memory.budgeted(budget).run(collected) }
        return .complete(ExecuteResult(transactionID: cursor.transactionID, queryType: "select", items: items))
    }

    static func tooLargeMessage(_ memory: SelectQuery, limit: Int) -> String {
        let head = "result too large to build in memory (more than \(limit) bytes of documents): "
        if memory.streams {
            return head + "this read is answered whole; add a LIMIT or narrow the WHERE"
        }
        return head + "ORDER BY, GROUP BY, aggregates and DISTINCT that PostgreSQL cannot do need every document in memory; "
            + "add a LIMIT (ORDER BY on plain paths with a LIMIT is done by PostgreSQL) or narrow the WHERE"
    }

    /// Rows of `SELECT t.n, q.value ...` through the memory stage; a point read's document is
    /// offered to `readCache` with the snapshot's transaction number. Decoding and the memory
    /// stage run inline while they are cheap and off the event loop when not (`InMemoryEvaluation`).
    func documentsResult(_ rows: PostgresResult, memory: SelectQuery, cacheAs key: DocumentReadCache.Key?) async throws -> ExecuteResult {
        let txn = try rows[0].decode(0, as: Int64.self)
        if let key, readCache.isEnabled, rows.count == 1, !rows[0].isNull(1) {
            let doc = try Self.decodeJSON(rows[0], column: 1)
            if case .object = doc {
                // A point read (`SELECT *`: the memory stage passes the document through): serialize
                // once, for the cache and for this response.
                let json = JSON.serialize(doc)
                readCache.insert(key, json: json, txn: txn)
                return ExecuteResult(transactionID: txn, queryType: "select", itemsJSON: [json])
            }
        }
        let items = try await InMemoryEvaluation.run(deadline: inMemoryDeadline) { budget in
            try budget.charge(DecodeCost.steps(rows, column: 1))
            var docs: [Value] = []
            docs.reserveCapacity(rows.count)
            for row in rows where !row.isNull(1) { docs.append(try Self.decodeJSON(row, column: 1)) }
            return try memory.budgeted(budget).run(docs)
        }
        return ExecuteResult(transactionID: txn, queryType: "select", items: items)
    }

    func show(_ name: String?) async throws -> ExecuteResult {
        let stored = try await settings()
        var items: [Value] = []
        for setting in SystemSetting.allCases where name == nil || name?.uppercased() == setting.rawValue {
            items.append(.object(["name": .string(setting.rawValue), "value": stored[setting.rawValue] ?? setting.defaultValue]))
        }
        if let name, items.isEmpty { throw StoreError.invalid("unknown setting \(name)") }
        return ExecuteResult(transactionID: try await currentTransaction(), queryType: "show", items: items)
    }

    func runDDL(_ statement: Statement) async throws -> ExecuteResult {
        var sql: String
        switch statement {
        case .createIndex(let c): sql = planner.createIndexSQL(c)
        case .dropIndex(let d): sql = try planner.dropIndexSQL(d)
        default: throw StoreError.invalid("not DDL")
        }
        // CONCURRENTLY: build or drop without blocking writers (must run outside a transaction).
        if sql.hasPrefix("CREATE INDEX ") { sql = "CREATE INDEX CONCURRENTLY " + sql.dropFirst("CREATE INDEX ".count) }
        if sql.hasPrefix("DROP INDEX ") { sql = "DROP INDEX CONCURRENTLY " + sql.dropFirst("DROP INDEX ".count) }
        do {
            _ = try await pool.query(PostgresQuery(unsafeSQL: sql))
        } catch let e as PostgresError {
            throw Self.indexError(e, statement) ?? e
        }
        return ExecuteResult(transactionID: try await currentTransaction(), queryType: statement.queryType)
    }

    /// The caller's mistakes in CREATE/DROP INDEX, told in DQL's terms rather than as a SQLSTATE.
    static func indexError(_ e: PostgresError, _ statement: Statement) -> StoreError? {
        switch (e.sqlState, statement) {
        case ("42P07", .createIndex(let c)):  // duplicate_table: an index (or a relation) has that name
            return .conflict("index \(c.name) on \(c.collection) already exists (use CREATE INDEX IF NOT EXISTS)")
        case ("42704", .dropIndex(let d)):  // undefined_object
            return .notFound("index \(d.name) on \(d.collection ?? "?") does not exist (use DROP INDEX IF EXISTS)")
        default:
            return nil
        }
    }

    // MARK: - Transactions and settings

    /// The newest committed transaction number.
    public func currentTransaction() async throws -> Int64 {
        try await Self.currentTransaction(pool)
    }

    static func currentTransaction(_ pool: PostgresPool) async throws -> Int64 {
        try await pool.query("SELECT n FROM bigpeer_txn")[0].decode(0, as: Int64.self)
    }

    func waitForTransaction(_ n: Int64, within limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        var delay = Duration.milliseconds(2)
        while try await currentTransaction() < n {
            guard ContinuousClock.now < deadline else { throw StoreError.unknownTransaction(n) }
            try await Task.sleep(for: delay)
            delay = min(delay * 2, .milliseconds(100))
        }
    }

    static let settingsQuery: PostgresQuery = "SELECT name, value FROM bigpeer_settings"

    func settings(on conn: PostgresConnection? = nil) async throws -> [String: Value] {
        let rows = if let conn { try await conn.query(Self.settingsQuery) } else { try await pool.query(Self.settingsQuery) }
        return try Self.decodeSettings(rows)
    }

    static func decodeSettings(_ rows: PostgresResult) throws -> [String: Value] {
        var out: [String: Value] = [:]
        for row in rows { out[try row.decode(0, as: String.self)] = try Self.decodeJSON(row, column: 1) }
        return out
    }

    func strictMode(on conn: PostgresConnection? = nil) async throws -> Bool {
        try await settings(on: conn)[SystemSetting.strictMode.rawValue]?.boolValue ?? true
    }

    static func decodeJSON(_ row: PostgresRow, column: Int) throws -> Value {
        try row.withRawValue(column) { raw -> Value in
            guard let raw else { return .null }
            do { return try JSON.parse(raw, limits: .stored) } catch { throw StoreError.corrupt("invalid JSON in column \(column): \(error)") }
        }
    }
}

extension SQLParameter {
    var postgresBind: PostgresBind {
        switch self {
        case .text(let s): PostgresBind(type: PostgresType.text, text: s)
        case .jsonb(let s): PostgresBind(type: PostgresType.jsonb, text: s)
        case .bigint(let n): PostgresBind(type: PostgresType.int8, text: String(n))
        }
    }
}
