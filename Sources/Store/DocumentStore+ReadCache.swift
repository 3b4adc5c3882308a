import DQL
import Values

/// Point reads through `readCache`. Keeping it correct is the change feed's job alone (see
/// `DocumentReadCache` for the argument): own commits reach it before they are acknowledged
/// (`ChangeFeed.committed`), other instances' through the change log.
extension DocumentStore {
    /// The cache key of `SELECT * FROM c WHERE _id = <string>` (parameter or literal, either side),
    /// with no other clause; nil for any other statement or a non-string id (jsonb compares numbers
    /// by value and objects by content, which a string key cannot mirror).
    static func pointReadKey(_ s: SelectStatement, arguments: [String: Value]) -> DocumentReadCache.Key? {
        guard s.projections == [.all], !s.distinct, s.groupBy.isEmpty, s.having == nil, s.orderBy.isEmpty,
              s.limit == nil, s.offset == nil, let id = pointID(s.filter, arguments: arguments) else { return nil }
        return DocumentReadCache.Key(collection: s.from.name, id: id)
    }

    /// The id of a filter that is exactly `_id = <string>` (a literal or parameter, either side).
    /// A string `_id` equals exactly one stored id (jsonb compares strings by content), so point
    /// reads may use the cache and point writes may skip the candidate query; other types
    /// (numbers compare by value, objects by content) go through PostgreSQL.
    static func pointID(_ filter: Expression?, arguments: [String: Value]) -> String? {
        guard case .binary(.equal, let l, let r)? = filter else { return nil }
        func isID(_ e: Expression) -> Bool {
            if case .path(let p) = e { return p.root == "_id" && p.components.isEmpty }
            return false
        }
        func string(_ e: Expression) -> String? {
            switch e {
            case .literal(.string(let v)): return v
            case .parameter(let name): if case .string(let v)? = arguments[name] { return v }
            default: break
            }
            return nil
        }
        return isID(l) ? string(r) : isID(r) ? string(l) : nil
    }

    /// The answer to a point read from `readCache`, or nil to read PostgreSQL. The cache holds
    /// documents, not answers: a hit is checked against the caller's rule for its collection (in
    /// memory, exactly as PostgreSQL would have), and a document the rule hides is no answer.
    func cachedPointRead(_ key: DocumentReadCache.Key, minimumTransaction: Int64?, readRules: DocumentRules, now: Int64) -> ExecuteResult? {
        guard let hit = readCache.lookup(key, minimumTransaction: minimumTransaction) else { return nil }
        if readRules.condition(for: key.collection) != nil {
            guard let document = try? JSON.parse(hit.json) else { return nil }
            guard readRules.allows(document, in: key.collection, nowMilliseconds: now) else {
                return ExecuteResult(transactionID: hit.transactionID, queryType: "select", items: [])
            }
        }
        // Only objects are cached, which `SELECT *` passes through the memory stage unchanged.
        return ExecuteResult(transactionID: hit.transactionID, queryType: "select", itemsJSON: [hit.json])
    }
}
