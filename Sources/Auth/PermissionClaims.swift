import DQL
import Values

/// A token's `permissions` claim: the shape of the `permissions` in Ditto's authentication
/// webhook answer, so an identity provider can put the same object in either place
/// (docs/AUTH.md, "Rules"):
///
///     "permissions": {
///       "read":  {"everything": false, "queriesByCollection": {"orders": ["site = :claims.site"], "parts": ["true"]}},
///       "write": {"everything": false, "queriesByCollection": {"orders": ["true"]}}
///     }
///
/// - `everything: true`: every collection, no rule (then `queriesByCollection` must be empty).
/// - Else the collections of `queriesByCollection` only; each query is a rule (DQL condition or
///   Ditto's legacy form, with `:claims.NAME` resolved against the token's own claims); several
///   for one collection are ORed. An absent `read` or `write` grants nothing.
/// - Read queries are read rules, write queries write rules (a write must leave the document
///   matching them, and may only change documents that match them before).
public enum PermissionClaims {
    public struct Granted: Sendable, Hashable {
        public var read: CollectionScope
        public var write: CollectionScope
        public var readRules: DocumentRules
        public var writeRules: DocumentRules
    }

    /// The grants of `permissions`, or why it is refused (for `JWTError.malformed`).
    public static func parse(_ permissions: Value, claims: [String: Value]) -> Result<Granted, DocumentRuleError> {
        guard case .object(let fields) = permissions else { return .failure(DocumentRuleError("permissions must be an object")) }
        if let extra = fields.keys.sorted().first(where: { $0 != "read" && $0 != "write" && $0 != "remoteQuery" }) {
            return .failure(DocumentRuleError("permissions has an unknown member \(extra)"))
        }
        do throws(DocumentRuleError) {
            let (read, rules) = try side(fields["read"], "read", claims: claims)
            let (write, writeRules) = try side(fields["write"], "write", claims: claims)
            return .success(Granted(read: read, write: write, readRules: rules, writeRules: writeRules))
        } catch {
            return .failure(error)
        }
    }

    static func side(_ value: Value?, _ name: String, claims: [String: Value]) throws(DocumentRuleError) -> (CollectionScope, DocumentRules) {
        guard let value else { return (.none, .none) }
        guard case .object(let fields) = value else { throw DocumentRuleError("permissions.\(name) must be an object") }
        var everything = false
        switch fields["everything"] {
        case nil, .bool(false)?: break
        case .bool(true)?: everything = true
        default: throw DocumentRuleError("permissions.\(name).everything must be true or false")
        }
        var queries: [String: Value] = [:]
        switch fields["queriesByCollection"] {
        case nil, .null?: break
        case .object(let q)?: queries = q
        default: throw DocumentRuleError("permissions.\(name).queriesByCollection must be an object")
        }
        if everything {
            guard queries.isEmpty else {
                throw DocumentRuleError("permissions.\(name): everything: true with queriesByCollection is ambiguous; give one of them")
            }
            return (.all, .none)
        }
        var rules = DocumentRules()
        var count = 0
        for (collection, list) in queries.sorted(by: { $0.key < $1.key }) {
            guard !collection.isEmpty else { throw DocumentRuleError("permissions.\(name).queriesByCollection names an empty collection") }
            guard case .array(let items) = list, !items.isEmpty else {
                throw DocumentRuleError("permissions.\(name).queriesByCollection.\(collection) must be a non-empty array of queries")
            }
            for item in items {
                guard case .string(let text) = item else {
                    throw DocumentRuleError("permissions.\(name).queriesByCollection.\(collection) holds a query that is not a string")
                }
                count += 1
                guard count <= DocumentRule.maxRulesPerCredential else {
                    throw DocumentRuleError("permissions.\(name) has more than \(DocumentRule.maxRulesPerCredential) queries")
                }
                let rule = try DocumentRule.parse(collection: collection, condition: text)
                rules.add(collection: collection, text: rule.text, condition: try rule.resolved(claims: claims))
            }
        }
        return (.only(Set(queries.keys)), rules)
    }
}
