// A SELECT's memory stage applied one document at a time, for results too large to hold: only
// queries whose rows do not depend on the rows after them stream (no ORDER BY, GROUP BY,
// aggregate or DISTINCT); WHERE, projection, OFFSET and LIMIT then need only a count.

import Values

extension SelectQuery {
    /// True when each result row depends on its own document alone, so rows can be answered as
    /// documents arrive (`SelectStream`); false when all documents must be seen first (sorting,
    /// grouping, aggregates, DISTINCT).
    public var streams: Bool { !isAggregate && !statement.distinct && orderBy.isEmpty }
}

/// `SelectQuery.run` over documents fed one by one, for a query that `streams`: yields the same
/// rows in the same order, holding nothing but two counters.
public struct SelectStream: Sendable {
    public private(set) var query: SelectQuery
    private var skipped = 0
    private var produced = 0

    /// nil when `query` does not stream (it needs all documents first: use `run`).
    public init?(_ query: SelectQuery) {
        guard query.streams else { return nil }
        self.query = query
    }

    /// The same stream, its counters kept, evaluating under `budget` (nil: none).
    public func budgeted(_ budget: EvaluationBudget?) -> SelectStream {
        var copy = self
        copy.query = query.budgeted(budget)
        return copy
    }

    /// True once LIMIT rows have been produced: later documents cannot change the result.
    public var isDone: Bool { query.limit.map { produced >= $0 } ?? false }

    /// The result row for `document`, or nil when WHERE, OFFSET or LIMIT leaves it out.
    public mutating func row(for document: Value) throws(DQLEvaluationError) -> Value? {
        guard !isDone, try query.matches(document) else { return nil }
        if skipped < query.offset {
            skipped += 1
            return nil
        }
        produced += 1
        return try query.project(document, query.evaluator)
    }
}
