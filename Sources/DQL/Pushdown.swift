// The pushdown planner: which part of a query PostgreSQL does, and what is left for memory.
//
// It never changes a result, only the amount of work:
// - WHERE is split into top-level AND conjuncts; each conjunct that compiles exactly (see
//   PushdownPredicate.swift) goes to SQL, the rest stays as the residual filter.
// - ORDER BY on paths becomes an SQL sort on a *coarsening* of DQL's total order (type rank, then
//   number, then string with COLLATE "C"; arrays and objects tie). With LIMIT, SQL fetches
//   `limit + offset` rows `WITH TIES`, so every row that could be in the DQL answer is returned,
//   and memory re-sorts exactly and applies OFFSET and LIMIT.
// - LIMIT is pushed only when nothing in memory can drop rows (no residual, no DISTINCT, no
//   aggregate); OFFSET is always applied in memory.
// - `SELECT COUNT(*)` with a fully pushed WHERE becomes `SELECT count(*)`.
// The store runs `plan.sql` with `plan.parameters`, decodes each returned `value`, and runs
// `plan.memoryQuery` over those documents (or `plan.countRows` in count mode).

import Values

/// Where documents live. Names are identifiers, quoted in the SQL.
public struct PushdownTable: Sendable, Hashable {
    public var name: String
    public var collectionColumn: String
    public var idColumn: String
    public var valueColumn: String
    /// Raw SQL AND-ed into every WHERE (e.g. `deleted = false`). Never built from user input.
    public var unsafeExtraPredicate: String?
    /// Set when the store guarantees that a document whose `_id` is the string s has `id = s`: then
    /// `_id = 'literal'` also constrains the id column, so the primary key finds the row.
    public var idColumnHoldsStringIds: Bool
    /// Set when every row the planner can return has `id = value -> '_id'` (jsonb), e.g. because
    /// `unsafeExtraPredicate` keeps out the tombstones whose value is NULL: then the path `_id`
    /// compiles to the id column, which the primary key indexes, and no index on
    /// `value -> '_id'` is needed.
    public var idColumnMirrorsValueID: Bool

    public init(name: String = "documents", collectionColumn: String = "collection", idColumn: String = "id",
                valueColumn: String = "value", unsafeExtraPredicate: String? = nil, idColumnHoldsStringIds: Bool = false,
                idColumnMirrorsValueID: Bool = false) {
        self.name = name
        self.collectionColumn = collectionColumn
        self.idColumn = idColumn
        self.valueColumn = valueColumn
        self.unsafeExtraPredicate = unsafeExtraPredicate
        self.idColumnHoldsStringIds = idColumnHoldsStringIds
        self.idColumnMirrorsValueID = idColumnMirrorsValueID
    }
}

public struct PushdownPlan: Sendable {
    public enum Output: Sendable, Hashable {
        /// Rows are `value` documents; run `memoryQuery` over them.
        case documents
        /// One row with one bigint; turn it into the result with `countRows`.
        case count(column: String)
    }

    public var sql: String
    public var parameters: [SQLParameter]
    public var output: Output
    /// The WHERE conjuncts PostgreSQL evaluates, and the rest (nil when everything was pushed).
    public var pushedConditions: [Expression]
    public var residual: Expression?
    public var orderPushed: Bool
    public var limitPushed: Bool
    /// The original query with WHERE reduced to the residual: what memory runs over the SQL rows.
    public var memoryQuery: SelectQuery
    /// A pushed condition is FALSE (a one-time filter that folded false, a comparison with NULL):
    /// the SQL returns no row whatever the data, so a caller may skip asking PostgreSQL.
    public var readsNoRow = false

    /// The result of a count-mode plan, given the count PostgreSQL returned.
    public func countRows(_ count: Int64) -> [Value] {
        guard case .count(let column) = output else { return [] }
        let rows: [Value] = [.object([column: .int(count)])]
        let start = min(memoryQuery.offset, 1)
        return Array(rows[start..<(memoryQuery.limit.map { min(1, start + min($0, 1)) } ?? 1)])
    }

    /// The text EXPLAIN shows.
    public var explanation: String {
        var lines = ["PostgreSQL:", "  " + sql]
        if !parameters.isEmpty {
            lines.append("Parameters:")
            for (i, p) in parameters.enumerated() { lines.append("  $\(i + 1) = \(p)") }
        }
        // Printed as one AND, so a pushed OR term keeps its parentheses.
        let pushed = pushedConditions.dropFirst().reduce(pushedConditions.first) { acc, e in acc.map { .binary(.and, $0, e) } }
        lines.append("Pushed conditions: " + (pushed.map { Printer.print($0) } ?? "none"))
        lines.append("Residual filter (in memory): " + (residual.map { Printer.print($0) } ?? "none"))
        var memory: [String] = []
        let s = memoryQuery.statement
        if case .count = output { memory.append("build the COUNT row") }
        if !s.groupBy.isEmpty || memoryQuery.isAggregate, output == .documents { memory.append("group and aggregate") }
        if s.distinct { memory.append("DISTINCT") }
        if !s.orderBy.isEmpty { memory.append("sort (exact DQL order)") }
        if memoryQuery.offset > 0 { memory.append("OFFSET \(memoryQuery.offset)") }
        if let l = memoryQuery.limit { memory.append("LIMIT \(l)") }
        memory.append("projection")
        lines.append("In memory: " + memory.joined(separator: ", "))
        return lines.joined(separator: "\n")
    }
}

public struct PushdownPlanner: Sendable {
    public var table: PushdownTable

    public init(table: PushdownTable = PushdownTable()) {
        self.table = table
    }

    /// Steps the planner may spend folding constants (`:s LIKE :p`, `regexp_like(:s, :p)`), which
    /// happens wherever the statement is planned, event loops included. A constant that needs more
    /// is left unfolded: it stays in the residual, evaluated in memory under the caller's budget.
    public static let constantFoldingSteps = 100_000

    public func plan(_ select: SelectStatement, context: EvaluationContext) throws(DQLEvaluationError) -> PushdownPlan {
        let full = try SelectQuery(select, context: context)  // validates LIMIT/OFFSET, aggregates
        let value = SQLBuilder.quoteIdentifier(table.valueColumn)
        var folding = context
        folding.budget = EvaluationBudget(maxSteps: Self.constantFoldingSteps)
        var compiler = PredicateCompiler(valueColumn: value, idColumn: mirroredIDColumn, evaluator: Evaluator(context: folding))
        var conditions = [SQLBuilder.quoteIdentifier(table.collectionColumn) + " = " + compiler.sql.bind(.text(select.from.name))]
        if let extra = table.unsafeExtraPredicate { conditions.append("(" + extra + ")") }
        var pushed: [Expression] = [], residual: [Expression] = []
        var readsNoRow = false
        for conjunct in Self.conjuncts(select.filter) {
            // A conjunct that fails part-way may already have bound parameters: roll them back.
            let mark = compiler.sql.parameters.count
            if let t = compiler.compile(conjunct) {
                pushed.append(conjunct)
                conditions.append(t.whenTrue)
                if t.whenTrue == "FALSE" { readsNoRow = true }
                if table.idColumnHoldsStringIds, let id = stringIdEquality(conjunct, compiler) {
                    conditions.append(SQLBuilder.quoteIdentifier(table.idColumn) + " = " + compiler.sql.bind(.text(id)))
                }
            } else {
                compiler.sql.parameters.removeSubrange(mark...)
                residual.append(conjunct)
            }
        }
        let residualFilter = residual.dropFirst().reduce(residual.first) { acc, e in acc.map { .binary(.and, $0, e) } }
        var memoryStatement = select
        memoryStatement.filter = residualFilter
        let memoryQuery = try SelectQuery(memoryStatement, context: context)
        let from = " FROM " + SQLBuilder.quoteIdentifier(table.name) + " WHERE " + conditions.joined(separator: " AND ")

        // COUNT(*) alone, everything pushed: let PostgreSQL count.
        if residual.isEmpty, select.groupBy.isEmpty, select.having == nil, select.projections.count == 1,
           case .expression(.aggregate(.count, nil, _), let alias) = select.projections[0] {
            return PushdownPlan(sql: "SELECT count(*)" + from, parameters: compiler.sql.parameters,
                                output: .count(column: alias ?? "($1)"), pushedConditions: pushed, residual: nil,
                                orderPushed: false, limitPushed: false, memoryQuery: memoryQuery, readsNoRow: readsNoRow)
        }

        var sql = "SELECT " + value + from
        var orderPushed = false, limitPushed = false
        let canLimit = residual.isEmpty && !full.isAggregate && !select.distinct
        let paths = full.orderBy.compactMap { t -> (Path, Bool)? in
            if case .path(let p) = t.expression { return (p, t.descending) }
            return nil
        }
        let total = full.limit.map { Int64(clamping: $0) &+ Int64(full.offset) }.map { $0 < 0 ? Int64.max : $0 }
        if !full.orderBy.isEmpty, paths.count == full.orderBy.count, canLimit, let total {
            // SQL keys are exact for scalars and leave arrays/objects tied. A later key (and the final
            // `_id` tie-break) is only exact within an exact group, so it is blanked (NULL, so those
            // rows stay tied and WITH TIES returns them all) wherever an earlier sort value is a
            // container: the SQL order then stays a coarsening of the DQL order.
            var keys: [String] = []
            let terms = paths + [(Path("_id"), false)]
            for (i, term) in terms.enumerated() {
                let earlier = terms.prefix(i).map { "jsonb_typeof(\(compiler.jsonPath($0.0))) IN ('array', 'object')" }
                for key in sortKeys(compiler.jsonPath(term.0), descending: term.1) {
                    if earlier.isEmpty { keys.append(key); continue }
                    let dir = term.1 ? " DESC" : " ASC"
                    let expr = String(key.dropLast(dir.count))
                    keys.append("(CASE WHEN " + earlier.joined(separator: " OR ") + " THEN NULL ELSE " + expr + " END)" + dir)
                }
            }
            sql += " ORDER BY " + keys.joined(separator: ", ")
            sql += " FETCH FIRST (" + compiler.sql.bind(.bigint(total)) + ") ROWS WITH TIES"  // a cast needs the parentheses here
            orderPushed = true
            limitPushed = true
        } else if full.orderBy.isEmpty, canLimit, let total {
            sql += " LIMIT " + compiler.sql.bind(.bigint(total))
            limitPushed = true
        }
        return PushdownPlan(sql: sql, parameters: compiler.sql.parameters, output: .documents, pushedConditions: pushed,
                            residual: residualFilter, orderPushed: orderPushed, limitPushed: limitPushed, memoryQuery: memoryQuery,
                            readsNoRow: readsNoRow)
    }

    /// The documents an UPDATE, DELETE or EVICT touches are chosen like a `SELECT *`.
    public func planFilter(collection: CollectionReference, filter: Expression?, orderBy: [OrderingTerm] = [],
                           limit: Expression? = nil, offset: Expression? = nil, context: EvaluationContext) throws(DQLEvaluationError) -> PushdownPlan {
        var s = SelectStatement(projections: [.all], from: collection)
        s.filter = filter
        s.orderBy = orderBy
        s.limit = limit
        s.offset = offset
        return try plan(s, context: context)
    }

    /// `_id = <string constant>` (either side): the string, for the id-column shortcut.
    func stringIdEquality(_ e: Expression, _ compiler: PredicateCompiler) -> String? {
        guard case .binary(.equal, let l, let r) = e else { return nil }
        let idPath = Expression.path(Path("_id"))
        let other = l == idPath ? r : r == idPath ? l : nil
        guard let other, case .string(let s)?? = compiler.constant(other) else { return nil }
        return s
    }

    static func conjuncts(_ e: Expression?) -> [Expression] {
        guard let e else { return [] }
        if case .binary(.and, let l, let r) = e { return conjuncts(l) + conjuncts(r) }
        return [e]
    }

    /// SQL sort keys monotone in DQL's total order for the jsonb expression `j`.
    func sortKeys(_ j: String, descending: Bool) -> [String] {
        let dir = descending ? " DESC" : " ASC"
        return [
            "(CASE WHEN \(j) IS NULL THEN 0 ELSE CASE jsonb_typeof(\(j)) WHEN 'null' THEN 1 WHEN 'boolean' THEN "
                + "(CASE WHEN \(j) = 'true'::jsonb THEN 3 ELSE 2 END) WHEN 'number' THEN 4 WHEN 'string' THEN 5 "
                + "WHEN 'array' THEN 6 ELSE 7 END END)" + dir,
            "(CASE WHEN jsonb_typeof(\(j)) = 'number' THEN (\(j))::numeric END)" + dir,
            "((CASE WHEN jsonb_typeof(\(j)) = 'string' THEN (\(j) #>> '{}') END) COLLATE \"C\")" + dir,
        ]
    }

    // MARK: Indexes

    /// The PostgreSQL name of a DQL index: readable, unique per (collection, name), within 63 bytes.
    ///
    /// PostgreSQL silently truncates identifiers to 63 bytes (NAMEDATALEN - 1), so the name must
    /// fit before the hash that makes it unique, or two long names that share a prefix would become
    /// one index (DROP INDEX of one would drop the other). The readable parts keep only ASCII
    /// letters and digits (20 bytes each at most); the 64-bit FNV-1a hash over the exact UTF-8
    /// bytes of "collection NUL name" tells apart names that differ anywhere, by one byte or by a
    /// Unicode-equivalent spelling. Longest: 4 + 20 + 1 + 20 + 1 + 16 = 62 bytes.
    public func indexName(collection: String, name: String) -> String {
        func clean(_ s: String) -> String {
            let bytes = s.utf8.prefix(20).map { b -> UInt8 in
                let alnum = (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A)
                return alnum ? b : UInt8(ascii: "_")
            }
            return String(decoding: bytes, as: UTF8.self)
        }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in Array(collection.utf8) + [0] + Array(name.utf8) {
            hash = (hash ^ UInt64(b)) &* 0x100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "dql_" + clean(collection) + "_" + clean(name) + "_" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// The quoted id column when it stands for the path `_id` (`PushdownTable.idColumnMirrorsValueID`).
    var mirroredIDColumn: String? { table.idColumnMirrorsValueID ? SQLBuilder.quoteIdentifier(table.idColumn) : nil }

    /// DDL for CREATE INDEX: a btree on (collection, each path's jsonb), the expressions the
    /// planner's equality and range predicates use.
    public func createIndexSQL(_ c: CreateIndexStatement) -> String {
        let value = SQLBuilder.quoteIdentifier(table.valueColumn)
        let compiler = PredicateCompiler(valueColumn: value, idColumn: mirroredIDColumn, evaluator: Evaluator(context: EvaluationContext()))
        let columns = [SQLBuilder.quoteIdentifier(table.collectionColumn)] + c.paths.map { "(" + compiler.jsonPath($0) + ")" }
        return "CREATE INDEX " + (c.ifNotExists ? "IF NOT EXISTS " : "") + SQLBuilder.quoteIdentifier(indexName(collection: c.collection, name: c.name))
            + " ON " + SQLBuilder.quoteIdentifier(table.name) + " (" + columns.joined(separator: ", ") + ")"
    }

    /// DDL for DROP INDEX; the collection is needed to find the PostgreSQL name.
    public func dropIndexSQL(_ d: DropIndexStatement) throws(DQLEvaluationError) -> String {
        guard let collection = d.collection else { throw .invalidStatement("DROP INDEX needs ON collection") }
        return "DROP INDEX " + (d.ifExists ? "IF EXISTS " : "") + SQLBuilder.quoteIdentifier(indexName(collection: collection, name: d.name))
    }

    /// EXPLAIN for any statement.
    public func explain(_ statement: Statement, context: EvaluationContext) throws(DQLEvaluationError) -> String {
        switch statement {
        case .select(let s): return try plan(s, context: context).explanation
        case .update(let u):
            return "UPDATE: documents chosen by\n" + (try planFilter(collection: u.collection, filter: u.filter, orderBy: u.orderBy,
                                                                      limit: u.limit, offset: u.offset, context: context)).explanation
        case .delete(let r): return "DELETE: documents chosen by\n" + (try planFilter(collection: r.collection, filter: r.filter, context: context)).explanation
        case .evict(let r): return "EVICT: documents chosen by\n" + (try planFilter(collection: r.collection, filter: r.filter, context: context)).explanation
        case .createIndex(let c): return createIndexSQL(c)
        case .dropIndex(let d): return try dropIndexSQL(d)
        case .insert(let i): return "INSERT of \(i.documents.count) document(s), ON ID CONFLICT \(i.conflictPolicy.rawValue)"
        case .system: return "system setting (no data access)"
        case .explain(let inner): return try explain(inner, context: context)
        }
    }
}
