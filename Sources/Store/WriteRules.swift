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

}

/// A write its write rules refused: what the audit log says of it (docs/AUTH.md, "Audit log").
/// Its `description` is what the client is told (the collection only); the documents and the
/// rules are for the operator. Bounded whatever the write: the first `maxNamedDocuments` ids and
/// the count.
public struct WriteRuleRefusal: Sendable, Equatable, CustomStringConvertible {
    public var collection: String
    /// `insert`, `update` (a statement's kind), or `upload` (a sync upload).
    public var operation: String
    /// The first refused documents' ids, in the order of the write.
    public var documentIDs: [Value]
    /// How many documents (upload entries for `upload`) were refused.
    public var refused: Int
    /// The collection's write rules as written (ORed: the change matched none of them).
    public var rules: [String]

    public static let maxNamedDocuments = 5

    public init(collection: String, operation: String, documentIDs: [Value], refused: Int, rules: [String]) {
        self.collection = collection
        self.operation = operation
        self.documentIDs = Array(documentIDs.prefix(Self.maxNamedDocuments))
        self.refused = refused
        self.rules = rules
    }

    public var description: String {
        if operation == "upload" { return DocumentStore.writeRuleRejection(collection) }
        return "not permitted by the write rules of collection \(collection): the statement would change a document "
            + "they do not allow (before or after the change); nothing was written"
    }
}

extension DocumentRules {
    /// The error of a statement whose `checks` at `refused` (their indexes) these rules refuse.
    func refusal(of refused: [Int], among checks: [WriteRuleCheck], in collection: String, operation: String) -> StoreError {
        let indexes = Set(refused)
        let ids = checks.lazy.filter { indexes.contains($0.index) }.compactMap { ($0.after ?? $0.before)?["_id"] }
        return .forbidden(WriteRuleRefusal(collection: collection, operation: operation, documentIDs: Array(ids.prefix(WriteRuleRefusal.maxNamedDocuments)),
                                           refused: refused.count, rules: texts(for: collection)))
    }

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

    /// Throws `StoreError.forbidden` unless the current write rules allow every one of `checks`
    /// (`operation`: the statement's kind, for the audit log).
    func enforceWriteRules(_ checks: [WriteRuleCheck], collection: String, operation: String) async throws {
        let refused = try await refusedByWriteRules(checks, collection: collection, now: writeRulesNow)
        if !refused.isEmpty { throw writeRules.refusal(of: refused, among: checks, in: collection, operation: operation) }
    }
}
