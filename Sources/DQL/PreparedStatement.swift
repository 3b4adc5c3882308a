// One entry point for executors (the store on PostgreSQL, the small peer's local store): parse,
// bind arguments, validate, and get back what to run. Nothing here touches storage.

import Values

public enum PreparedStatement: Sendable {
    /// Run `pushdown.sql`, then `pushdown.memoryQuery` over the rows (or `countRows`). A local store
    /// without PostgreSQL runs `query` over all documents of the collection instead.
    case select(query: SelectQuery, pushdown: PushdownPlan)
    case insert(InsertPlan)
    /// Choose documents with `selection` (then its `memoryQuery`), apply `plan.operations(for:)` to each.
    case update(plan: UpdatePlan, selection: PushdownPlan)
    case delete(selection: PushdownPlan)
    case evict(selection: PushdownPlan)
    /// A validated `ALTER SYSTEM SET`.
    case setSetting(SystemSetting, Value)
    /// `ALTER SYSTEM RESET name` (nil: RESET ALL).
    case resetSetting(SystemSetting?)
    /// `SHOW name` (nil: SHOW ALL).
    case showSetting(SystemSetting?)
    case createIndex(CreateIndexStatement, sql: String)
    case dropIndex(DropIndexStatement, sql: String)
    case explain(String)

    /// Parses and prepares `text` with `context` (arguments, clock, strict mode).
    public static func prepare(_ text: String, context: EvaluationContext, planner: PushdownPlanner = PushdownPlanner(),
                               limits: DQLParseLimits = .default) throws -> PreparedStatement {
        try prepare(DQL.parse(text, limits: limits), context: context, planner: planner)
    }

    public static func prepare(_ statement: Statement, context: EvaluationContext,
                               planner: PushdownPlanner = PushdownPlanner()) throws(DQLEvaluationError) -> PreparedStatement {
        switch statement {
        case .select(let s):
            return .select(query: try SelectQuery(s, context: context), pushdown: try planner.plan(s, context: context))
        case .insert(let i):
            return .insert(try InsertPlan(i, context: context))
        case .update(let u):
            return .update(plan: try UpdatePlan(u, context: context),
                           selection: try planner.planFilter(collection: u.collection, filter: u.filter, orderBy: u.orderBy,
                                                             limit: u.limit, offset: u.offset, context: context))
        case .delete(let r):
            return .delete(selection: try planner.planFilter(collection: r.collection, filter: r.filter, context: context))
        case .evict(let r):
            return .evict(selection: try planner.planFilter(collection: r.collection, filter: r.filter, context: context))
        case .system(.set(let name, let e)):
            guard let v = try Evaluator(context: context).evaluate(e, in: nil) else {
                throw .invalidStatement("ALTER SYSTEM SET \(name) needs a value")
            }
            let (setting, value) = try SystemSetting.validate(name: name, value: v)
            return .setSetting(setting, value)
        case .system(.reset(let name)):
            return .resetSetting(try name.map(setting))
        case .system(.show(let name)):
            return .showSetting(try name.map(setting))
        case .createIndex(let c):
            return .createIndex(c, sql: planner.createIndexSQL(c))
        case .dropIndex(let d):
            return .dropIndex(d, sql: try planner.dropIndexSQL(d))
        case .explain(let inner):
            return .explain(try planner.explain(inner, context: context))
        }
    }

    static func setting(_ name: String) throws(DQLEvaluationError) -> SystemSetting {
        guard let s = SystemSetting(rawValue: name.uppercased()) else {
            throw .invalidStatement("unknown setting \(name); known: \(SystemSetting.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return s
    }
}
