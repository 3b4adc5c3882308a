// Runs a SELECT over an in-memory sequence of documents: WHERE, GROUP BY + aggregates, HAVING,
// projection, DISTINCT, ORDER BY, OFFSET, LIMIT — in that order. Used by the store for the part of
// a query PostgreSQL did not do (the residual) and by the small peer's local store for all of it.
//
// Result rows are objects. `*` copies the document's fields; `expr AS name` sets `name`; a path
// without an alias is named by its last field (`SELECT a.b` gives `b`); any other expression
// without an alias is named `($n)`, n being its 1-based position in the projection list.
// ORDER BY ties are broken by `_id` (total order), then by input order, so results are
// deterministic whatever order the documents arrive in.

import Values

public struct SelectQuery: Sendable {
    public let statement: SelectStatement
    public private(set) var evaluator: Evaluator
    public let limit: Int?
    public let offset: Int
    let isAggregate: Bool
    let aggregates: [Expression]
    let orderBy: [OrderingTerm]
    let having: Expression?

    public init(_ statement: SelectStatement, context: EvaluationContext) throws(DQLEvaluationError) {
        self.statement = statement
        evaluator = Evaluator(context: context)
        if statement.filter?.containsAggregate == true { throw .aggregateNotAllowed("WHERE") }
        if statement.groupBy.contains(where: \.containsAggregate) { throw .aggregateNotAllowed("GROUP BY") }
        // Aliases may be used in ORDER BY and HAVING (a bare name equal to an alias means the projection).
        var aliases: [String: Expression] = [:]
        for case .expression(let e, let alias?) in statement.projections { aliases[alias] = e }
        func resolve(_ e: Expression) -> Expression {
            e.substituting { node in
                if case .path(let p) = node, p.components.isEmpty, let target = aliases[p.root] { return target }
                return nil
            }
        }
        orderBy = statement.orderBy.map { OrderingTerm(resolve($0.expression), descending: $0.descending, explicitDirection: $0.explicitDirection) }
        having = statement.having.map(resolve)
        var found: [Expression] = []
        for case .expression(let e, _) in statement.projections { e.collectAggregates(into: &found) }
        having?.collectAggregates(into: &found)
        for t in orderBy { t.expression.collectAggregates(into: &found) }
        for case .aggregate(_, let arg?, _) in found where arg.containsAggregate { throw .aggregateNotAllowed("an aggregate's argument") }
        aggregates = found
        isAggregate = !found.isEmpty || !statement.groupBy.isEmpty || statement.having != nil
        if !isAggregate, statement.having != nil { throw .invalidStatement("HAVING needs GROUP BY or an aggregate") }
        limit = try Self.count(statement.limit, "LIMIT", evaluator)
        offset = try Self.count(statement.offset, "OFFSET", evaluator) ?? 0
    }

    static func count(_ e: Expression?, _ clause: String, _ evaluator: Evaluator) throws(DQLEvaluationError) -> Int? {
        guard let e else { return nil }
        guard let v = try evaluator.evaluate(e, in: nil), let n = v.int64Value, n >= 0 else {
            throw .invalidStatement("\(clause) must be a non-negative integer")
        }
        return Int(clamping: n)
    }

    /// The same query evaluated under `budget` (steps and deadline for in-memory work).
    public func budgeted(_ budget: EvaluationBudget?) -> SelectQuery {
        var copy = self
        copy.evaluator = evaluator.budgeted(budget)
        return copy
    }

    /// Whether `document` satisfies the WHERE clause (true when there is none).
    public func matches(_ document: Value) throws(DQLEvaluationError) -> Bool {
        guard let filter = statement.filter else { return true }
        return try evaluator.isTrue(filter, in: document)
    }

    struct Row {
        var value: Value
        var keys: [Value?]
        var tie: Value?
    }

    /// Runs the whole query over `documents`.
    public func run<S: Sequence>(_ documents: S) throws(DQLEvaluationError) -> [Value] where S.Element == Value {
        var rows: [Row] = []
        if isAggregate {
            rows = try groupedRows(documents)
        } else {
            for doc in documents where try matches(doc) {
                rows.append(Row(value: try project(doc, evaluator), keys: try orderKeys(doc, evaluator), tie: doc["_id"]))
            }
        }
        let budget = evaluator.context.budget
        if statement.distinct {
            try budget?.charge(rows.count)
            var seen = Set<GroupKey>()
            rows = rows.filter { seen.insert(GroupKey($0.value)).inserted }
        }
        if !orderBy.isEmpty {
            try budget?.charge(rows.count * SortCost.log2(rows.count) * orderBy.count)
            let directions = orderBy.map(\.descending)
            let indexed = rows.enumerated().sorted { x, y in
                for (k, desc) in directions.enumerated() {
                    let c = DQLOrder.compare(x.element.keys[k], y.element.keys[k])
                    if c != 0 { return desc ? c > 0 : c < 0 }
                }
                let t = DQLOrder.compare(x.element.tie, y.element.tie)
                if t != 0 { return t < 0 }
                return x.offset < y.offset
            }
            rows = indexed.map(\.element)
        }
        let start = min(offset, rows.count)
        let end = limit.map { min(rows.count, start + min($0, rows.count)) } ?? rows.count
        return rows[start..<end].map(\.value)
    }

    func orderKeys(_ doc: Value?, _ ev: Evaluator) throws(DQLEvaluationError) -> [Value?] {
        var keys: [Value?] = []
        keys.reserveCapacity(orderBy.count)
        for t in orderBy { keys.append(try ev.evaluate(t.expression, in: doc)) }
        return keys
    }

    func project(_ doc: Value?, _ ev: Evaluator) throws(DQLEvaluationError) -> Value {
        // `SELECT *` of a document: the merge below would rebuild the same object key by key.
        if statement.projections.count == 1, case .all = statement.projections[0], case .object? = doc, let doc { return doc }
        var row: [String: Value] = [:]
        for (n, p) in statement.projections.enumerated() {
            switch p {
            case .all:
                if case .object(let o)? = doc { row.merge(o) { _, new in new } }
            case .expression(let e, let alias):
                if let v = try ev.evaluate(e, in: doc) { row[alias ?? Self.defaultName(e, position: n + 1)] = v }
            }
        }
        return .object(row)
    }

    static func defaultName(_ e: Expression, position: Int) -> String {
        if case .path(let p) = e {
            switch p.components.last {
            case nil: return p.root
            case .field(let f)?: return f
            case .index?: break
            }
        }
        return "($\(position))"
    }

    func groupedRows<S: Sequence>(_ documents: S) throws(DQLEvaluationError) -> [Row] where S.Element == Value {
        var index: [GroupKey: Int] = [:]
        var groups: [(representative: Value?, accumulators: [Accumulator])] = []
        let fresh = aggregates.map { Accumulator($0) }
        for doc in documents where try matches(doc) {
            var keyValues: [Value?] = []
            for g in statement.groupBy { keyValues.append(try evaluator.evaluate(g, in: doc)) }
            let key = GroupKey.array(keyValues.map { GroupKey($0) })
            let slot: Int
            if let s = index[key] { slot = s } else {
                slot = groups.count
                index[key] = slot
                groups.append((doc, fresh))
            }
            for a in 0..<aggregates.count {
                try groups[slot].accumulators[a].add(doc, evaluator)
            }
        }
        // Without GROUP BY an aggregate query has exactly one group, even over no documents.
        if groups.isEmpty, statement.groupBy.isEmpty { groups.append((nil, fresh)) }
        var rows: [Row] = []
        for (n, group) in groups.enumerated() {
            var ev = evaluator
            var values: [Expression: Value] = [:]
            for (a, acc) in zip(aggregates, group.accumulators) { values[a] = try acc.result() }
            ev.aggregates = values
            if let having, try !ev.isTrue(having, in: group.representative) { continue }
            rows.append(Row(value: try project(group.representative, ev), keys: try orderKeys(group.representative, ev), tie: .int(Int64(n))))
        }
        return rows
    }
}

/// Running state of one aggregate over one group.
struct Accumulator {
    let function: AggregateFunction
    let argument: Expression?
    let distinct: Bool
    var count: Int64 = 0
    var intSum: Int64 = 0
    var doubleSum: Double = 0
    var sawDouble = false
    var best: Value?
    var seen = Set<GroupKey>()

    init(_ e: Expression) {
        if case .aggregate(let f, let arg, let d) = e {
            function = f; argument = arg; distinct = d
        } else {
            function = .count; argument = nil; distinct = false
        }
    }

    mutating func add(_ doc: Value, _ ev: Evaluator) throws(DQLEvaluationError) {
        guard let argument else { count += 1; return }  // COUNT(*)
        guard let v = try ev.evaluate(argument, in: doc), v != .null else { return }
        if distinct, !seen.insert(GroupKey(v)).inserted { return }
        switch function {
        case .count: count += 1
        case .min, .max:
            if let b = best {
                let c = DQLOrder.compare(v, b)
                if function == .min ? c < 0 : c > 0 { best = v }
            } else {
                best = v
            }
        case .sum, .avg:
            switch v {
            case .int(let i):
                let (s, o) = intSum.addingReportingOverflow(i)
                if o { throw .numericOverflow("\(function.rawValue)") }
                intSum = s
            case .double(let d):
                doubleSum += d
                sawDouble = true
            default: return
            }
            count += 1
        }
    }

    func result() throws(DQLEvaluationError) -> Value {
        switch function {
        case .count: return .int(count)
        case .min, .max: return best ?? .null
        case .sum:
            if count == 0 { return .null }
            if !sawDouble { return .int(intSum) }
            let total = Double(intSum) + doubleSum
            guard total.isFinite else { throw .numericOverflow("SUM") }
            return .double(total)
        case .avg:
            if count == 0 { return .null }
            let total = Double(intSum) + doubleSum
            guard total.isFinite else { throw .numericOverflow("AVG") }
            return .double(total / Double(count))
        }
    }
}
