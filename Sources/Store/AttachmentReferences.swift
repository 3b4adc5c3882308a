import CRDT
import DQL
import Postgres
import Values

/// Who may download an attachment without an attachment scope (docs/AUTH.md, "Attachments"):
/// whoever may read a live document that references it. The references are kept by triggers on
/// `documents` in `bigpeer_attachment_refs` (migrations/0014_attachment_refs.sql, docs/STORAGE.md).
extension DocumentStore {
    /// Whether some live document that references `id` is in a collection `mayRead` accepts and
    /// satisfies the caller's read rule for that collection, the rule pushed down to SQL as a
    /// SELECT's is. False when nothing references it, or nothing that does is readable: the
    /// caller then cannot tell an attachment it may not read from one that does not exist.
    public func attachmentIsReadable(_ id: AttachmentID, mayRead: (String) -> Bool, rules: DocumentRules) async throws(StoreError) -> Bool {
        do {
            for collection in try await collectionsReferencing(id) where mayRead(collection) {
                guard let rule = rules.condition(for: collection) else { return true }
                if try await someReference(to: id, in: collection, matches: rule) { return true }
            }
            return false
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The collections with documents that reference `id`, each once: a skip scan of the primary
    /// key (one index probe per collection), so an attachment that thousands of documents of one
    /// collection reference costs no more than one.
    func collectionsReferencing(_ id: AttachmentID) async throws -> [String] {
        var query: PostgresQuery = """
            WITH RECURSIVE c(name) AS (
                (SELECT collection FROM bigpeer_attachment_refs WHERE attachment_id = \(id.hex) ORDER BY collection LIMIT 1)
                UNION ALL
                SELECT (SELECT collection FROM bigpeer_attachment_refs WHERE attachment_id = \(id.hex) AND collection > c.name
                        ORDER BY collection LIMIT 1)
                FROM c WHERE c.name IS NOT NULL
            )
            SELECT name FROM c WHERE name IS NOT NULL
            """
        query.prepared = true
        return try await pool.query(query).map { try $0.decode(0, as: String.self) }
    }

    /// Whether a document of `collection` that references `id` satisfies `rule`: the rule planned
    /// like a SELECT's WHERE over just those documents, `LIMIT 1`.
    func someReference(to id: AttachmentID, in collection: String, matches rule: Expression) async throws -> Bool {
        var table = planner.table
        // The id is 64 lowercase hex digits (`AttachmentID` admits nothing else), so it is safe
        // as a literal; the planner's own binds keep their numbers.
        table.unsafeExtraPredicate = (table.unsafeExtraPredicate.map { "(\($0)) AND " } ?? "")
            + "EXISTS (SELECT 1 FROM bigpeer_attachment_refs r WHERE r.attachment_id = '\(id.hex)'"
            + " AND r.collection = documents.collection AND r.doc_id = documents.id)"
        let context = EvaluationContext(nowMilliseconds: Int64(Replica.systemMillis()), budget: Self.planningBudget())
        let plan = try PushdownPlanner(table: table).planFilter(collection: CollectionReference(collection), filter: rule,
                                                               limit: .literal(.int(1)), context: context)
        // A rule is accepted only if it pushes down whole (`DocumentRule.resolved`); should one
        // ever leave a residual, the answer is no rather than a check done after the LIMIT.
        guard plan.residual == nil else { return false }
        return try await !pool.query(PostgresQuery(unsafeSQL: plan.sql, binds: plan.parameters.map(\.postgresBind))).isEmpty
    }
}
