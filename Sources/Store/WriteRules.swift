// Enforcing the caller's write rules (docs/AUTH.md, "Write rules"): a write may change a document
// only when the document matches them before and after the change. UPDATE, DELETE and EVICT get
// the "before" half from their selection (`DocumentRules.restrictingWrites`, ANDed in before the
// job is queued); what they and INSERT produce, and every sync upload entry, is checked here, in
// memory, on the values the transaction is about to write — with each document's evaluation
// capped (`DocumentRule.maxEvaluationSteps`) and the whole check off the event loop when it is
// more than a loop's slice (`InMemoryEvaluation.run`).

import DQL
import Values

/// One change to check: a document's value before and after it (nil where there is none: before
/// a creation, after a deletion), and the position of what made it (an upload entry's index).
struct WriteRuleCheck: Sendable {
    var index: Int
    var before: Value?
    var after: Value?
}

extension DocumentStore {
    /// The `ack.rejected` message of an upload entry its write rules refuse (PROTOCOL.md §4.8):
    /// it names the collection, never the document.
    public static func writeRuleRejection(_ collection: String) -> String {
        "not permitted by the write rules of collection \(collection)"
    }

    /// The error of a statement that would change a document its write rules refuse (403).
    static func writeRuleRefusal(_ collection: String) -> StoreError {
        .forbidden("not permitted by the write rules of collection \(collection): the statement would change a document "
            + "they do not allow (before or after the change); nothing was written")
    }
}

extension DocumentRules {
    /// The indexes of `checks` these write rules refuse for `collection` (steps charged to `budget`).
    func refused(_ checks: [WriteRuleCheck], in collection: String, now: Int64, budget: EvaluationBudget? = nil) throws -> [Int] {
        try checks.compactMap { c in
            try allowsWrite(before: c.before, after: c.after, in: collection, nowMilliseconds: now, budget: budget) ? nil : c.index
        }
    }
}

extension WriteTransaction {
    /// The indexes of `checks` the current write rules refuse for `collection`: inline within a
    /// loop's slice, else on the evaluation threads.
    func refusedByWriteRules(_ checks: [WriteRuleCheck], collection: String, now: Int64) async throws -> [Int] {
        guard !checks.isEmpty, writeRules.condition(for: collection) != nil else { return [] }
        let rules = writeRules
        return try await InMemoryEvaluation.run(deadline: nil) { budget in try rules.refused(checks, in: collection, now: now, budget: budget) }
    }

    /// Throws `writeRuleRefusal` unless the current write rules allow every one of `checks`.
    func enforceWriteRules(_ checks: [WriteRuleCheck], collection: String) async throws {
        if try await !refusedByWriteRules(checks, collection: collection, now: writeRulesNow).isEmpty {
            throw DocumentStore.writeRuleRefusal(collection)
        }
    }
}
