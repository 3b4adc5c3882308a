import DQL
import Synchronization
import Values

/// Pushdown plans for the commonest REST read, reused across requests:
///
///     SELECT <projections> FROM c WHERE a = :x AND b.c = :y     (no GROUP BY/HAVING/ORDER/LIMIT/OFFSET/DISTINCT)
///
/// Why only this shape: the planner's SQL depends on argument *values* in general (NULL or MISSING
/// make a condition FALSE, a string compares differently from a number, LIKE patterns and IN
/// lists are inspected), so a plan cannot be keyed by statement text alone. For `path = :param`
/// with a present, non-NULL argument the SQL is always `(path = $n::jsonb)` with the argument's JSON
/// as the bind, whatever its type — so the SQL text and a recipe for the binds (collection, then
/// each parameter's JSON, in conjunct order) are a function of the statement.
///
/// Safety net: a template is stored only after the full planner, run on that request, produced
/// exactly the SQL and binds the recipe reproduces (`record`); any request whose arguments are
/// missing or NULL is planned in full. Strict mode, indexes and type declarations do not enter the
/// planner's SELECT SQL, so nothing here needs invalidating. Bounded: cleared past `capacity`.
final class EqualityPlanCache: Sendable {
    struct Template: Sendable {
        /// The complete statement (already wrapped with the transaction counter).
        var sql: String
        var parameterNames: [String]
    }

    private let templates = Mutex<[SelectStatement: Template]>([:])
    let capacity: Int

    init(capacity: Int = 512) { self.capacity = capacity }

    /// The parameter names of `s`'s conditions, in order, when `s` has the cacheable shape.
    static func parameterNames(_ s: SelectStatement) -> [String]? {
        guard !s.distinct, s.groupBy.isEmpty, s.having == nil, s.orderBy.isEmpty, s.limit == nil, s.offset == nil else { return nil }
        var names: [String] = []
        func collect(_ e: Expression) -> Bool {
            switch e {
            case .binary(.and, let l, let r): return collect(l) && collect(r)
            case .binary(.equal, .path, .parameter(let n)), .binary(.equal, .parameter(let n), .path):
                names.append(n)
                return true
            default: return false
            }
        }
        if let filter = s.filter, !collect(filter) { return nil }
        return names
    }

    /// The binds for `template` under `arguments`, or nil if some argument is missing or NULL.
    static func binds(_ s: SelectStatement, _ names: [String], _ arguments: [String: Value]) -> [SQLParameter]? {
        var out: [SQLParameter] = [.text(s.from.name)]
        for name in names {
            guard let v = arguments[name], v != .null else { return nil }
            out.append(.jsonb(JSON.string(v)))
        }
        return out
    }

    /// A cached plan for `s` under `arguments`: the SQL, its binds, and the memory stage.
    func plan(_ s: SelectStatement, context: EvaluationContext) throws -> (sql: String, binds: [SQLParameter], memory: SelectQuery)? {
        guard let template = templates.withLock({ $0[s] }),
              let binds = Self.binds(s, template.parameterNames, context.arguments) else { return nil }
        var memory = s
        memory.filter = nil  // everything was pushed down
        return (template.sql, binds, try SelectQuery(memory, context: context))
    }

    /// Remembers the plan the full planner made for `s`, if the recipe reproduces it exactly.
    func record(_ s: SelectStatement, plan: PushdownPlan, wrappedSQL: String, arguments: [String: Value]) {
        guard case .documents = plan.output, plan.residual == nil, !plan.limitPushed, !plan.orderPushed,
              let names = Self.parameterNames(s), let binds = Self.binds(s, names, arguments),
              binds == plan.parameters else { return }
        templates.withLock { t in
            if t.count >= capacity { t.removeAll() }
            t[s] = Template(sql: wrappedSQL, parameterNames: names)
        }
    }

    var count: Int { templates.withLock { $0.count } }
}
