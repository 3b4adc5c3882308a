import DQL
import Synchronization
import Values

extension WriteTransaction {
    /// Runs a pure part of a write statement's evaluation (its documents, its SET values, the
    /// re-check of the documents it locked) the way every in-memory stage runs: inline for a
    /// loop's slice, and again from the start on the evaluation threads when that is not enough
    /// (`InMemoryEvaluation.run`). A write's transaction is driven from an event loop, and a
    /// statement may take up to `InMemoryEvaluation.writeStatementSteps` (~0.5-2 s of CPU): inline,
    /// every other connection of that loop would wait for it.
    ///
    /// The steps taken are charged to the statement's own cap (`context.budget`), which spans all
    /// of its parts; a part that would exceed what is left fails with the statement's 400.
    func evaluate<T: Sendable>(_ context: EvaluationContext,
                               _ work: @escaping @Sendable (EvaluationContext) throws -> T) async throws -> T {
        let statement = context.budget
        let remaining = statement.map { max(0, $0.maxSteps - $0.steps) } ?? .max
        let (result, steps) = try await InMemoryEvaluation.run(deadline: nil, maxSteps: remaining) { budget -> (T, Int) in
            var part = context
            part.budget = budget
            do {
                return (try work(part), budget.steps)
            } catch DQLEvaluationError.budgetExceeded {
                // What this part had left, not the statement's cap: say the cap.
                throw DQLEvaluationError.budgetExceeded(steps: statement?.maxSteps ?? remaining)
            }
        }
        try statement?.charge(steps)
        return result
    }
}

extension DocumentStore {
    /// Evaluates the INSERT's documents at `range` (`InsertPlan.evaluate`), counted in
    /// `insertDocumentsEvaluated`. Every evaluation of INSERT documents in the store goes here.
    func evaluateInsertDocuments(_ s: InsertStatement, _ range: Range<Int>, context: EvaluationContext) throws(DQLEvaluationError)
        -> (documents: [[String: Value]], warnings: [String]) {
        insertDocumentsEvaluated.add(range.count, ordering: .relaxed)
        return try InsertPlan.evaluate(s, documents: range, context: context)
    }

    /// The INSERT's plan with all its documents evaluated (as `InsertPlan.init`, counted).
    func insertPlan(_ s: InsertStatement, context: EvaluationContext) throws(DQLEvaluationError) -> InsertPlan {
        let evaluated = try evaluateInsertDocuments(s, s.documents.indices, context: context)
        return InsertPlan(unevaluated: s, context: context, documents: evaluated.documents, warnings: evaluated.warnings)
    }
}
