import CRDT
import DQL
import Postgres
import Values

extension DocumentStore {
    /// A subscription's WHERE clause as planned for a scan of its collection here: the part
    /// PostgreSQL runs, and the residual evaluated per row.
    func subscriptionScan(_ statement: SelectStatement, arguments: [String: Value]) async throws -> SubscriptionScan {
        let context = EvaluationContext(arguments: arguments, nowMilliseconds: Int64(Replica.systemMillis()), strictMode: try await strictMode(),
                                        budget: DocumentStore.planningBudget())
        let plan = try planner.plan(statement, context: context)
        let prefix = "SELECT \"value\" FROM \"documents\" WHERE "
        guard plan.sql.hasPrefix(prefix), case .documents = plan.output else {
            throw StoreError.invalid("a subscription must be SELECT * FROM collection [WHERE ...]")
        }
        return SubscriptionScan(conditions: String(plan.sql.dropFirst(prefix.count)), binds: plan.parameters.map(\.postgresBind), plan: plan)
    }
}

/// `subscriptionScan`'s answer: the SQL conditions with their binds (more may be appended), and
/// the plan whose residual is checked on each row.
struct SubscriptionScan {
    var conditions: String
    var binds: [PostgresBind]
    let plan: PushdownPlan

    /// Appends a bind and returns its `$n` number.
    mutating func bind(_ b: PostgresBind) -> Int {
        binds.append(b)
        return binds.count
    }

    /// The value column is read only when a residual needs it.
    var valueColumn: String { plan.residual == nil ? "NULL::jsonb" : "value" }

    /// The part of the WHERE clause PostgreSQL cannot run, here, within the same per-document
    /// budget as an initial sync's (a document it cannot decide on is not listed: it is then sent
    /// whole, which is always correct).
    func residualMatches(_ row: PostgresRow, valueColumn column: Int) throws -> Bool {
        guard plan.residual != nil else { return true }
        let value = try DocumentStore.decodeJSON(row, column: column)
        return (try? InMemoryEvaluation.subscriptionMatches(plan.memoryQuery, value))?.matches == true
    }
}
