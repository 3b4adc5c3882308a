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
    /// `_id` compiles to `documents.id`: every live row's value holds its `_id` (INSERT sets it,
    /// nothing changes it), and tombstones (value NULL) are filtered out.
    let planner = PushdownPlanner(table: PushdownTable(name: "documents", unsafeExtraPredicate: "NOT \"deleted\"", idColumnMirrorsValueID: true))
    let replica: Mutex<Replica>
    let knownCollections = Mutex<Set<String>>([])
    /// `DQL_STRICT_MODE` as last read by a write transaction (see `RememberedSetting`).
    let rememberedStrictMode = Mutex<RememberedSetting?>(nil)
    /// Transactions this instance committed, for its change feed (see `OwnCommits`).
    let ownCommits = Mutex(OwnCommits())
    let batcher: WriteBatcher
    /// Parsed statements by text (`parse`): REST clients repeat statements with new `args`.
    let statements = StatementCache(limits: DocumentStore.parseLimits)
    /// Reusable plans for `WHERE path = :param AND ...` reads.
    let equalityPlans = EqualityPlanCache()
    /// Point reads by string `_id` answered from memory; off until a change feed enables it.
    public let readCache: DocumentReadCache

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
    /// - Parameter readCacheBytes: memory for `readCache` (it still stays off until a change feed
    ///   calls `readCache.enable`).
    public static func open(pool: PostgresPool, readCacheBytes: Int = 0, statementTimeout: Duration? = nil) async throws -> DocumentStore {
        let site = try await pool.query("SELECT site_id FROM bigpeer_identity")[0].decode(0, as: Int64.self)
        return DocumentStore(pool: pool, site: SiteID(UInt64(bitPattern: site)), readCacheBytes: readCacheBytes, statementTimeout: statementTimeout)
    }

    init(pool: PostgresPool, site: SiteID, readCacheBytes: Int = 0, statementTimeout: Duration? = nil,
         generateID: @escaping @Sendable () -> Value = DocumentKey.generateID,
         gatherWindow: Duration = WriteBatcher.defaultGatherWindow) {
        self.pool = pool
        self.statementTimeout = statementTimeout
        self.readCache = DocumentReadCache(capacityBytes: readCacheBytes)
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
    public func execute(_ statement: Statement, arguments: [String: Value] = [:], minimumTransaction: Int64? = nil,
                        transactionWait: Duration = .seconds(5)) async throws(StoreError) -> ExecuteResult {
        do {
            let now = Int64(Replica.systemMillis())
            if case .select(let s) = statement,
               let hit = cachedPointRead(s, arguments: arguments, minimumTransaction: minimumTransaction) {
                return hit
            }
            if let minimumTransaction { try await waitForTransaction(minimumTransaction, within: transactionWait) }
            switch statement {
            case .select(let s):
                return try await select(s, context: EvaluationContext(arguments: arguments, nowMilliseconds: now, budget: Self.planningBudget()))
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
                let result = try await batcher.submit(WriteBatcher.Job(work: .statement(statement, arguments), nowMillis: now), store: self)
                noteCommitted(statement, result)
                return result
            }
        } catch {
            throw StoreError.from(error)
        }
    }

    // MARK: - Reads

    /// For what planning evaluates on the caller's thread (LIMIT and OFFSET): a loop's share,
    /// then 400. (Constant folding has its own budget in the planner; the memory stage gets its
    /// own budget from `InMemoryEvaluation`.)
    static func planningBudget() -> EvaluationBudget {
        EvaluationBudget(maxSteps: InMemoryEvaluation.onLoopSteps)
    }

    func select(_ s: SelectStatement, context: EvaluationContext) async throws -> ExecuteResult {
        // Point reads and other `path = :param` filters reuse their plan (EqualityPlanCache).
        if let cached = try equalityPlans.plan(s, context: context) {
            var query = PostgresQuery(unsafeSQL: cached.sql, binds: cached.binds.map(\.postgresBind))
            query.prepared = true
            let rows = try await pool.query(query)
            return try await documentsResult(rows, memory: cached.memory, cacheAs: Self.pointReadKey(s, arguments: context.arguments))
        }
        let plan = try planner.plan(s, context: context)
        // LEFT JOIN LATERAL: one statement (one snapshot) yields the counter even with no rows.
        let sql = "SELECT t.n, q.* FROM bigpeer_txn t LEFT JOIN LATERAL (" + plan.sql + ") q ON true"
        equalityPlans.record(s, plan: plan, wrappedSQL: sql, arguments: context.arguments)
        var query = PostgresQuery(unsafeSQL: sql, binds: plan.parameters.map(\.postgresBind))
        // The SQL text depends only on the statement's shape (values are binds), so a session
        // prepares it once and skips PostgreSQL's parse and plan on every later request.
        query.prepared = true
        let rows = try await pool.query(query)
        let txn = try rows[0].decode(0, as: Int64.self)
        switch plan.output {
        case .count:
            return ExecuteResult(transactionID: txn, queryType: "select", items: plan.countRows(try rows[0].decode(1, as: Int64.self)))
        case .documents:
            return try await documentsResult(rows, memory: plan.memoryQuery, cacheAs: Self.pointReadKey(s, arguments: context.arguments))
        }
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
        let deadline = statementTimeout.map { ContinuousClock.now + $0 }
        let items = try await InMemoryEvaluation.run(deadline: deadline) { budget in
            var docs: [Value] = []
            docs.reserveCapacity(rows.count)
            for row in rows where !row.isNull(1) {
                // Decoding is charged too (a step per 4 bytes): a large result moves off the loop.
                try budget.charge(row.withRawValue(1) { $0?.count ?? 0 } / 4 + 1)
                docs.append(try Self.decodeJSON(row, column: 1))
            }
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
        _ = try await pool.query(PostgresQuery(unsafeSQL: sql))
        return ExecuteResult(transactionID: try await currentTransaction(), queryType: statement.queryType)
    }

    // MARK: - Transactions and settings

    /// The newest committed transaction number.
    public func currentTransaction() async throws -> Int64 {
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
            do { return try JSON.parse(raw) } catch { throw StoreError.corrupt("invalid JSON in column \(column): \(error)") }
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
