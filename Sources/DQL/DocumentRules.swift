// Per-document permission rules (docs/AUTH.md, "Rules"): for each collection, a condition a
// document must satisfy for a caller to see it. The rules of a caller are resolved once, when its
// credential is loaded (claims substituted, validated, bounded); every read path then ANDs the
// collection's condition into the statement it runs (`restricting`), so PostgreSQL filters before
// any ORDER BY, OFFSET or LIMIT, and in-memory matching (sync) sees the same condition.
//
// A collection without a rule is not restricted by rules (the caller's collection scope alone
// decides whether it may read it at all). A collection with rules shows the documents for which
// at least one of them is true (OR); FALSE, NULL and MISSING all hide the document.

import Values

/// One caller's rules of one kind: read rules (which documents it sees) or write rules (which
/// documents it may change: a write is allowed when the document matches them before and after
/// the change, `allowsWrite`).
public struct DocumentRules: Sendable, Hashable {
    /// Per collection, the OR of its rules, claims already substituted.
    public private(set) var conditions: [String: Expression] = [:]
    /// Per collection, the rules as written, for `keys list` and logs.
    public private(set) var texts: [String: [String]] = [:]

    public init() {}

    /// Unrestricted: every collection the caller's scope covers is visible whole.
    public static let none = DocumentRules()

    public var isEmpty: Bool { conditions.isEmpty }

    /// Adds a resolved rule; rules of one collection are ORed (a `true` among them: all of it).
    public mutating func add(collection: String, text: String, condition: Expression) {
        let all = Expression.literal(.bool(true))
        conditions[collection] = conditions[collection].map { $0 == all || condition == all ? all : .binary(.or, $0, condition) } ?? condition
        texts[collection, default: []].append(text)
    }

    /// The condition a document of `collection` must satisfy, or nil when no rule names it.
    /// Byte-exact, as PostgreSQL compares names: "\u{212A}ate" does not find the rule of "Kate".
    public func condition(for collection: String) -> Expression? {
        guard !conditions.isEmpty, let i = conditions.index(forKey: collection),
              conditions[i].key.utf8Equals(collection) else { return nil }
        return conditions[i].value
    }

    /// The rules of `collection` as written (empty when none names it), found as `condition(for:)` finds its condition.
    public func texts(for collection: String) -> [String] {
        guard let i = texts.index(forKey: collection), texts[i].key.utf8Equals(collection) else { return [] }
        return texts[i].value
    }

    /// `statement` with the rule of the collection it reads ANDed into its WHERE: SELECT, and the
    /// selection of UPDATE, DELETE and EVICT (a caller cannot change what it cannot see), also
    /// inside EXPLAIN (which then shows the rule in the plan). Other statements are unchanged.
    public func restricting(_ statement: Statement) -> Statement {
        guard !conditions.isEmpty else { return statement }
        switch statement {
        case .select(let s): return .select(restricting(s))
        case .update(var u):
            u.filter = Self.and(u.filter, condition(for: u.collection.name))
            return .update(u)
        case .delete(var r):
            r.filter = Self.and(r.filter, condition(for: r.collection.name))
            return .delete(r)
        case .evict(var r):
            r.filter = Self.and(r.filter, condition(for: r.collection.name))
            return .evict(r)
        case .explain(let inner): return .explain(restricting(inner))
        case .insert, .system, .createIndex, .dropIndex: return statement
        }
    }

    /// As write rules: the selection of UPDATE, DELETE and EVICT (also inside EXPLAIN) ANDed with
    /// the rule of their collection, so they choose only among documents the caller may write
    /// (the check before the change). SELECT and INSERT are unchanged.
    public func restrictingWrites(_ statement: Statement) -> Statement {
        guard !conditions.isEmpty else { return statement }
        switch statement {
        case .update, .delete, .evict: return restricting(statement)
        case .explain(let inner): return .explain(restrictingWrites(inner))
        case .select, .insert, .system, .createIndex, .dropIndex: return statement
        }
    }

    public func restricting(_ select: SelectStatement) -> SelectStatement {
        var s = select
        s.filter = Self.and(s.filter, condition(for: s.from.name))
        return s
    }

    static func and(_ filter: Expression?, _ rule: Expression?) -> Expression? {
        guard let rule, rule != .literal(.bool(true)) else { return filter }
        guard let filter else { return rule }
        return .binary(.and, filter, rule)
    }

    /// Whether the caller may see `document` (a materialized value with `_id`) of `collection`:
    /// the rule evaluated in memory, as PostgreSQL evaluates it in SQL (the pushdown is exact).
    /// An evaluation error or a rule that needs more than `DocumentRule.maxEvaluationSteps` hides
    /// the document.
    public func allows(_ document: Value, in collection: String, nowMilliseconds: Int64) -> Bool {
        guard let condition = condition(for: collection) else { return true }
        let context = EvaluationContext(nowMilliseconds: nowMilliseconds, budget: EvaluationBudget(maxSteps: DocumentRule.maxEvaluationSteps))
        return (try? Evaluator(context: context).isTrue(condition, in: document)) == true
    }

    /// Whether write rules allow a change of a document of `collection` from `before` to `after`
    /// (materialized values; nil where the document does not exist: before a creation, after a
    /// deletion): each that exists must match (docs/AUTH.md, "Write rules"). Each evaluation gets
    /// `DocumentRule.maxEvaluationSteps` (past them: not allowed) and its steps are charged to
    /// `budget`, whose exhaustion (a loop's slice, a statement's cap) is thrown.
    public func allowsWrite(before: Value?, after: Value?, in collection: String, nowMilliseconds: Int64,
                            budget: EvaluationBudget? = nil) throws(DQLEvaluationError) -> Bool {
        guard let condition = condition(for: collection) else { return true }
        for document in [before, after] {
            guard let document else { continue }
            let own = EvaluationBudget(maxSteps: DocumentRule.maxEvaluationSteps)
            let context = EvaluationContext(nowMilliseconds: nowMilliseconds, budget: own)
            let matches = (try? Evaluator(context: context).isTrue(condition, in: document)) == true
            try budget?.charge(own.steps)
            if !matches { return false }
        }
        return true
    }
}

extension DocumentRules: CustomStringConvertible {
    /// `orders: site = 'A'; orders: site = 'B'; parts: true` (collections sorted), or `none`.
    public var description: String {
        guard !texts.isEmpty else { return "none" }
        return texts.keys.sorted().flatMap { c in (texts[c] ?? []).map { c + ": " + $0 } }.joined(separator: "; ")
    }
}
