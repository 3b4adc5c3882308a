// Parsing and validating one permission rule (docs/AUTH.md, "Rules").
//
// A rule is a DQL condition, or Ditto's legacy query form (`_id.site == 'x' && n > 2`), about one
// collection. It may name the caller's claims as `:claims.NAME` (a path into the claims:
// `:claims.org.site`, `:claims.sites[0]`); no other parameter. Rules may come from an attacker
// (a token's claims are the token issuer's, a key's rules its creator's), so everything about
// them is bounded before they are used: text length, nesting, path length, node count (before and
// after the claims are substituted), and the resolved condition must run entirely in PostgreSQL
// (no residual evaluated in memory per row). In memory (sync matching, the point-read cache) a
// rule gets `maxEvaluationSteps` per document.

import Values

public struct DocumentRule: Sendable, Hashable {
    public var collection: String
    /// The condition as written.
    public var text: String
    /// The parsed condition; `:claims.…` still unresolved (see `resolved(claims:)`).
    public var condition: Expression

    /// Longest rule text, in UTF-8 bytes.
    public static let maxTextBytes = 4096
    /// Most expression nodes in a rule, as written and once claims are substituted.
    public static let maxNodes = 256
    public static let maxResolvedNodes = 4096
    /// Most rules one credential may carry (all collections together).
    public static let maxRulesPerCredential = 64
    /// Steps a rule may take per document when evaluated in memory.
    public static let maxEvaluationSteps = 20_000
    static let parseLimits = DQLParseLimits(maxStatementBytes: maxTextBytes, maxExpressionDepth: 32, maxPathSteps: 16)

    /// `collection: condition` (the first colon separates them), e.g. `orders: site = :claims.site`.
    public static func parse(entry: String) throws(DocumentRuleError) -> DocumentRule {
        guard let colon = entry.firstIndex(of: ":") else {
            throw DocumentRuleError("a rule is collection: condition (e.g. orders: site = 'A'), got \"\(entry.prefix(80))\"")
        }
        let collection = entry[..<colon].trimmingSpaces
        return try parse(collection: collection, condition: String(entry[entry.index(after: colon)...]))
    }

    public static func parse(collection: String, condition text: String) throws(DocumentRuleError) -> DocumentRule {
        guard !collection.isEmpty, collection.utf8.count <= 255 else {
            throw DocumentRuleError("a rule's collection name must be 1 to 255 bytes")
        }
        if let problem = NameRules.problem(collection) { throw DocumentRuleError("collection name \"\(collection)\" \(problem)") }
        let text = text.trimmingSpaces
        guard !text.isEmpty else { throw DocumentRuleError("the rule for \(collection) is empty (write true for every document)") }
        guard text.utf8.count <= maxTextBytes else { throw DocumentRuleError("the rule for \(collection) is longer than \(maxTextBytes) bytes") }
        let condition = try parseCondition(text, collection: collection)
        guard condition.nodeCount <= maxNodes else {
            throw DocumentRuleError("the rule for \(collection) has more than \(maxNodes) expression nodes")
        }
        if condition.containsAggregate { throw DocumentRuleError("the rule for \(collection) uses an aggregate") }
        var stray: String?
        _ = condition.substituting { e in
            if Self.claimPath(e) != nil { return .literal(.null) }
            if case .parameter(let name) = e { stray = name }
            return nil
        }
        if let stray {
            throw DocumentRuleError("the rule for \(collection) uses :\(stray); rules take only the caller's claims, as :claims.NAME")
        }
        let rule = DocumentRule(collection: collection, text: text, condition: condition)
        _ = try rule.resolved(claims: [:])  // no claims: checks that the rest runs in PostgreSQL
        return rule
    }

    /// DQL first; then the legacy form, which a DQL parse refuses (`==`, `&&`) or reads as
    /// something other than a condition (`a || b` is a concatenation in DQL).
    static func parseCondition(_ text: String, collection: String) throws(DocumentRuleError) -> Expression {
        let dql: Result<Expression, DQLSyntaxError>
        do {
            var parser = Parser(tokens: try Lexer.tokenize(text), limits: parseLimits)
            let e = try parser.parseExpression()
            try parser.expectEnd(clauses: [])
            dql = .success(e)
        } catch {
            dql = .failure(error)
        }
        if case .success(let e) = dql, e.isCondition { return e }
        if let legacy = try? LegacyQuery.translate(text), legacy.condition.utf8.count <= 4 * maxTextBytes,
           var parser = try? Parser(tokens: Lexer.tokenize(legacy.condition), limits: DQLParseLimits(maxStatementBytes: 4 * maxTextBytes, maxExpressionDepth: 64, maxPathSteps: 16)),
           let e = try? parser.parseExpression(), (try? parser.expectEnd(clauses: [])) != nil {
            // The translation turns strings and numbers it quotes into `lqN` parameters: back to literals.
            let resolved = e.substituting { node in
                if case .parameter(let name) = node, let v = legacy.arguments[name] { return Self.literal(v) }
                return nil
            }
            if resolved.isCondition { return resolved }
        }
        switch dql {
        case .failure(let error): throw DocumentRuleError("the rule for \(collection) does not parse: \(error)")
        case .success: throw DocumentRuleError("the rule for \(collection) is not a condition (a comparison, IN, LIKE, IS, AND, OR, NOT, a function or true/false)")
        }
    }

    /// The condition with the caller's claims substituted. If any claim it names is missing or
    /// null the rule is FALSE: a missing claim hides everything, it never reveals anything
    /// (`:claims.site IS MISSING` cannot be used to pass a rule by omitting a claim).
    public func resolved(claims: [String: Value]) throws(DocumentRuleError) -> Expression {
        var missing = false
        let resolved = condition.substituting { e in
            guard let path = Self.claimPath(e) else { return nil }
            guard let v = Self.lookup(path, in: claims), v != .null else {
                missing = true
                return .literal(.null)
            }
            return Self.literal(v)
        }
        if missing { return .literal(.bool(false)) }
        guard resolved.nodeCount <= Self.maxResolvedNodes else {
            throw DocumentRuleError("the rule for \(collection) is too large once the claims are substituted (more than \(Self.maxResolvedNodes) nodes)")
        }
        var probe = SelectStatement(projections: [.all], from: CollectionReference(collection))
        probe.filter = resolved
        let plan: PushdownPlan
        do { plan = try PushdownPlanner().plan(probe, context: EvaluationContext()) } catch {
            throw DocumentRuleError("the rule for \(collection) is invalid: \(error)")
        }
        if let residual = plan.residual {
            throw DocumentRuleError("the rule for \(collection) cannot run in PostgreSQL (\(Printer.print(residual).prefix(120))); "
                + "use comparisons, IN, LIKE, IS NULL/MISSING, AND, OR and NOT on fields")
        }
        return resolved
    }

    /// Whether the condition names any of the caller's claims.
    public var usesClaims: Bool { condition.contains { Self.claimPath($0) != nil } }

    /// The steps after `:claims` when `e` is `:claims.a.b[0]` (at least one step), else nil.
    static func claimPath(_ e: Expression) -> [PathComponent]? {
        var steps: [PathComponent] = []
        var node = e
        while case .access(let base, let step) = node {
            steps.append(step)
            node = base
        }
        guard case .parameter("claims") = node, !steps.isEmpty else { return nil }
        return steps.reversed()
    }

    static func lookup(_ path: [PathComponent], in claims: [String: Value]) -> Value? {
        var current = Value.object(claims)
        for step in path {
            switch (step, current) {
            case (.field(let f), .object(let o)):
                guard let next = o[f] else { return nil }
                current = next
            case (.index(let i), .array(let a)):
                guard i >= 0, i < a.count else { return nil }
                current = a[i]
            default: return nil
            }
        }
        return current
    }

    /// A value as a constant expression (arrays and objects element by element).
    static func literal(_ v: Value) -> Expression {
        switch v {
        case .array(let items): .array(items.map(literal))
        case .object(let o): .object(o.keys.sorted().map { ObjectEntry($0, literal(o[$0] ?? .null)) })
        default: .literal(v)
        }
    }
}

/// Why a rule was refused (shown by `keys create`, and as the reason a token is refused).
public struct DocumentRuleError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension Expression {
    /// Nodes in the tree (each literal, path, operator and call counts one).
    var nodeCount: Int { 1 + children.reduce(0) { $0 + $1.nodeCount } }

    /// Whether the expression is shaped like a condition: its value can be a boolean.
    var isCondition: Bool {
        switch self {
        case .literal(.bool): true
        case .literal, .parameter, .path, .access, .array, .object, .aggregate: false
        case .unary(let op, _): op == .not
        case .binary(let op, _, _):
            switch op {
            case .or, .and, .equal, .notEqual, .less, .lessEqual, .greater, .greaterEqual: true
            case .concat, .add, .subtract, .multiply, .divide, .modulo: false
            }
        case .between, .inList, .inArray, .like, .isNull, .isMissing, .call: true
        }
    }
}

extension StringProtocol {
    var trimmingSpaces: String {
        String(drop(while: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }).reversed().drop(while: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }).reversed())
    }
}
