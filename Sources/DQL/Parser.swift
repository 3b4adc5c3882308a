// Recursive-descent parser for DQL statements (GraphQLSwift Language/Parser style: peek / expect /
// skip helpers over a token stream, one function per grammar rule, errors at the current token).
// The grammar, rule by rule, is in docs/DQL.md.

/// Bounds on what the parser accepts, so hostile input cannot exhaust memory or the stack.
public struct DQLParseLimits: Sendable, Hashable {
    /// Longest statement accepted, in UTF-8 bytes.
    public var maxStatementBytes: Int
    /// Deepest expression nesting (parentheses, unary operators, operator chains).
    public var maxExpressionDepth: Int

    /// Most steps in one path (`a.b[0]` has two after its root). PostgreSQL evaluates a path as
    /// nested `->` operators and runs out of stack depth long before 10,000 of them.
    public var maxPathSteps: Int

    public init(maxStatementBytes: Int = 256 * 1024, maxExpressionDepth: Int = 128, maxPathSteps: Int = 100) {
        self.maxStatementBytes = maxStatementBytes
        self.maxExpressionDepth = maxExpressionDepth
        self.maxPathSteps = maxPathSteps
    }

    public static let `default` = DQLParseLimits()
}

public enum DQL {
    /// Parses one DQL statement.
    public static func parse(_ text: String, limits: DQLParseLimits = .default) throws(DQLSyntaxError) -> Statement {
        guard text.utf8.count <= limits.maxStatementBytes else {
            throw DQLSyntaxError(location: SourceLocation(line: 1, column: 1, offset: 0),
                                 found: "a statement of \(text.utf8.count) bytes",
                                 expected: "at most \(limits.maxStatementBytes) bytes")
        }
        var parser = Parser(tokens: try Lexer.tokenize(text), limits: limits)
        let statement = try parser.parseStatement(allowExplain: true)
        // One optional terminator, as SQL habits write it; after it only the end may follow.
        let terminated = parser.skip(.semicolon)
        try parser.expectEnd(clauses: terminated ? [] : parser.followingClauses)
        return statement
    }
}

struct Parser {
    let tokens: [Token]
    let limits: DQLParseLimits
    var position = 0
    var depth = 0
    /// Clauses that could still follow at the current point, for "expected ..." at the end.
    var followingClauses: [String] = []

    init(tokens: [Token], limits: DQLParseLimits) {
        self.tokens = tokens
        self.limits = limits
    }

    var current: Token { tokens[position] }

    func peek(_ ahead: Int = 1) -> Token { tokens[min(position + ahead, tokens.count - 1)] }

    @discardableResult
    mutating func advance() -> Token {
        let t = tokens[position]
        if position < tokens.count - 1 { position += 1 }
        return t
    }

    func error(expected: String) -> DQLSyntaxError {
        DQLSyntaxError(location: current.location, found: current.errorDescription, expected: expected)
    }

    func at(_ k: Keyword) -> Bool { current.kind == .keyword(k) }

    mutating func skip(_ k: Keyword) -> Bool {
        if at(k) { advance(); return true }
        return false
    }

    mutating func skip(_ kind: TokenKind) -> Bool {
        if current.kind == kind { advance(); return true }
        return false
    }

    mutating func skipWord(_ word: String) -> Bool {
        if current.isWord(word) { advance(); return true }
        return false
    }

    mutating func expect(_ k: Keyword) throws(DQLSyntaxError) {
        guard skip(k) else { throw error(expected: k.rawValue) }
    }

    mutating func expect(_ kind: TokenKind, _ description: String) throws(DQLSyntaxError) {
        guard skip(kind) else { throw error(expected: description) }
    }

    mutating func expectWord(_ word: String) throws(DQLSyntaxError) {
        guard skipWord(word) else { throw error(expected: word) }
    }

    mutating func expectEnd(clauses: [String]) throws(DQLSyntaxError) {
        guard case .endOfInput = current.kind else {
            throw error(expected: (clauses + ["end of input"]).joinedAsAlternatives())
        }
    }

    /// A name: an unreserved identifier or a backtick-quoted one.
    mutating func parseName(_ what: String) throws(DQLSyntaxError) -> String {
        switch current.kind {
        case .identifier, .quotedIdentifier: return advance().text
        default: throw error(expected: what)
        }
    }

    // MARK: Statements

    mutating func parseStatement(allowExplain: Bool) throws(DQLSyntaxError) -> Statement {
        switch current.kind {
        case .keyword(.select): return .select(try parseSelect())
        case .keyword(.insert): return .insert(try parseInsert())
        case .keyword(.update): return .update(try parseUpdate())
        case .keyword(.delete):
            advance()
            return .delete(try parseRemove())
        case .keyword(.evict):
            advance()
            return .evict(try parseRemove())
        default: break
        }
        if skipWord("ALTER") {
            try expectWord("SYSTEM")
            if skip(.set) {
                let name = try parseName("a setting name")
                guard skip(.equal) || skipWord("TO") else { throw error(expected: "'=' or TO") }
                return .system(.set(name, try parseExpression()))
            }
            guard skipWord("RESET") else { throw error(expected: "SET or RESET") }
            if skipWord("ALL") { return .system(.reset(nil)) }
            return .system(.reset(try parseName("a setting name or ALL")))
        }
        if skipWord("SHOW") {
            if skipWord("ALL") { return .system(.show(nil)) }
            return .system(.show(try parseName("a setting name or ALL")))
        }
        if skipWord("CREATE") { return .createIndex(try parseCreateIndex()) }
        if skipWord("DROP") {
            try expectWord("INDEX")
            var ifExists = false
            if skipWord("IF") {
                try expectWord("EXISTS")
                ifExists = true
            }
            let name = try parseName("an index name")
            var collection: String?
            if skip(.on) { collection = try parseName("a collection name") }
            return .dropIndex(DropIndexStatement(ifExists: ifExists, name: name, collection: collection))
        }
        if allowExplain, skipWord("EXPLAIN") {
            return .explain(try parseStatement(allowExplain: false))
        }
        if current.isWord("SYNC") {
            throw error(expected: "a statement without SYNC CONTEXT (it runs on connected peers: POST /api/v4/sync/remote_execute)")
        }
        throw error(expected: "a statement (SELECT, INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM, SHOW, CREATE INDEX" + (allowExplain ? ", DROP INDEX or EXPLAIN)" : " or DROP INDEX)"))
    }

    mutating func parseCreateIndex() throws(DQLSyntaxError) -> CreateIndexStatement {
        try expectWord("INDEX")
        var ifNotExists = false
        if skipWord("IF") {
            try expect(.not)
            try expectWord("EXISTS")
            ifNotExists = true
        }
        let name = try parseName("an index name")
        try expect(.on)
        let collection = try parseName("a collection name")
        try expect(.leftParen, "'('")
        var paths: [Path] = []
        repeat { paths.append(try parsePath()) } while skip(.comma)
        try expect(.rightParen, "',' or ')'")
        return CreateIndexStatement(ifNotExists: ifNotExists, name: name, collection: collection, paths: paths)
    }

    /// `name` or `COLLECTION name (field TYPE, ...)`.
    mutating func parseCollection() throws(DQLSyntaxError) -> CollectionReference {
        if current.isWord("COLLECTION") {
            switch peek().kind {
            case .identifier, .quotedIdentifier:
                advance()
                let name = advance().text
                try expect(.leftParen, "'(' and the field types of COLLECTION \(name)")
                var declarations: [FieldDeclaration] = []
                repeat {
                    let path = try parsePath()
                    guard case .identifier = current.kind, let type = FieldType(rawValue: current.text.uppercased()) else {
                        throw error(expected: "a field type (REGISTER, MAP, COUNTER, PN_COUNTER or ATTACHMENT)")
                    }
                    advance()
                    declarations.append(FieldDeclaration(path, type))
                } while skip(.comma)
                try expect(.rightParen, "',' or ')'")
                return CollectionReference(name, declarations: declarations)
            default: break
            }
        }
        return CollectionReference(try parseName("a collection name"))
    }

    mutating func parseSelect() throws(DQLSyntaxError) -> SelectStatement {
        try expect(.select)
        let distinct = skip(.distinct)
        var projections: [Projection] = []
        repeat {
            if skip(.star) {
                projections.append(.all)
            } else {
                let e = try parseExpression()
                var alias: String?
                if skip(.as) { alias = try parseName("an alias") }
                projections.append(.expression(e, alias: alias))
            }
        } while skip(.comma)
        guard at(.from) else { throw error(expected: "',' or FROM") }
        advance()
        var s = SelectStatement(projections: projections, from: try parseCollection())
        s.distinct = distinct
        if skip(.where) { s.filter = try parseExpression() }
        if skip(.group) {
            try expect(.by)
            repeat { s.groupBy.append(try parseExpression()) } while skip(.comma)
        }
        if skip(.having) { s.having = try parseExpression() }
        s.orderBy = try parseOrderBy()
        (s.limit, s.offset) = try parseLimitOffset()
        followingClauses = remainingSelectClauses(s)
        return s
    }

    func remainingSelectClauses(_ s: SelectStatement) -> [String] {
        if s.offset != nil { return [] }
        if s.limit != nil { return ["OFFSET"] }
        if !s.orderBy.isEmpty { return ["LIMIT", "OFFSET"] }
        var c: [String] = []
        if s.filter == nil && s.groupBy.isEmpty && s.having == nil { c.append("WHERE") }
        if s.groupBy.isEmpty && s.having == nil { c.append("GROUP BY") }
        if s.having == nil { c.append("HAVING") }
        return c + ["ORDER BY", "LIMIT", "OFFSET"]
    }

    mutating func parseOrderBy() throws(DQLSyntaxError) -> [OrderingTerm] {
        guard skip(.order) else { return [] }
        try expect(.by)
        var terms: [OrderingTerm] = []
        repeat {
            let e = try parseExpression()
            if skip(.desc) {
                terms.append(OrderingTerm(e, descending: true))
            } else {
                terms.append(OrderingTerm(e, descending: false, explicitDirection: skip(.asc)))
            }
        } while skip(.comma)
        return terms
    }

    mutating func parseLimitOffset() throws(DQLSyntaxError) -> (Expression?, Expression?) {
        var limit: Expression?, offset: Expression?
        if skip(.limit) { limit = try parseExpression() }
        if skip(.offset) { offset = try parseExpression() }
        return (limit, offset)
    }

    mutating func parseInsert() throws(DQLSyntaxError) -> InsertStatement {
        try expect(.insert)
        try expect(.into)
        let collection = try parseCollection()
        let initial = skipWord("INITIAL")
        guard skipWord("DOCUMENTS") || (!initial && skipWord("VALUES")) else {
            throw error(expected: initial ? "DOCUMENTS" : "DOCUMENTS, VALUES or INITIAL DOCUMENTS")
        }
        var documents: [Expression] = []
        repeat {
            try expect(.leftParen, "'(' before a document")
            documents.append(try parseExpression())
            try expect(.rightParen, "')' after the document")
        } while skip(.comma)
        var policy: ConflictPolicy?
        if skip(.on) {
            try expectWord("ID")
            try expectWord("CONFLICT")
            if skipWord("FAIL") {
                policy = .fail
            } else if skipWord("DO") {
                if skipWord("NOTHING") { policy = .doNothing }
                else if skip(.update) { policy = .doUpdate }
                else if skipWord("UPDATE_LOCAL_DIFF") { policy = .doUpdateLocalDiff }
                else if skipWord("FAIL") { policy = .fail }
                else { throw error(expected: "NOTHING, UPDATE, UPDATE_LOCAL_DIFF or FAIL") }
            } else {
                throw error(expected: "FAIL or DO")
            }
        }
        followingClauses = policy == nil ? ["',' or ON ID CONFLICT"] : []
        return InsertStatement(collection: collection, initial: initial, documents: documents, onIdConflict: policy)
    }

    mutating func parseUpdate() throws(DQLSyntaxError) -> UpdateStatement {
        try expect(.update)
        var u = UpdateStatement(collection: try parseCollection())
        if skip(.apply) {
            repeat {
                let path = try parsePath()
                if skipWord("INCREMENT") {
                    try expect(.by)
                    u.apply.append(CounterUpdate(path, .increment(try parseExpression(), legacy: false)))
                } else if skipWord("PN_INCREMENT") {
                    try expect(.by)
                    u.apply.append(CounterUpdate(path, .increment(try parseExpression(), legacy: true)))
                } else if skipWord("RESTART") {
                    u.apply.append(CounterUpdate(path, .restart(skipWord("WITH") ? try parseExpression() : nil)))
                } else {
                    throw error(expected: "INCREMENT BY, PN_INCREMENT BY or RESTART")
                }
            } while skip(.comma)
        }
        if skip(.set) {
            repeat {
                let path = try parsePath()
                try expect(.equal, "'='")
                u.set.append(Assignment(path, try parseExpression()))
            } while skip(.comma)
        }
        if skip(.unset) {
            repeat { u.unset.append(try parsePath()) } while skip(.comma)
        }
        guard !(u.apply.isEmpty && u.set.isEmpty && u.unset.isEmpty) else { throw error(expected: "APPLY, SET or UNSET") }
        if skip(.where) { u.filter = try parseExpression() }
        u.orderBy = try parseOrderBy()
        (u.limit, u.offset) = try parseLimitOffset()
        followingClauses = u.offset != nil ? [] : u.limit != nil ? ["OFFSET"] : !u.orderBy.isEmpty ? ["LIMIT", "OFFSET"]
            : u.filter != nil ? ["ORDER BY", "LIMIT", "OFFSET"] : ["WHERE", "ORDER BY", "LIMIT", "OFFSET"]
        return u
    }

    /// `FROM collection [WHERE condition]`, shared by DELETE and EVICT.
    mutating func parseRemove() throws(DQLSyntaxError) -> RemoveStatement {
        try expect(.from)
        let collection = try parseCollection()
        var filter: Expression?
        if skip(.where) { filter = try parseExpression() }
        followingClauses = filter == nil ? ["WHERE"] : []
        return RemoveStatement(collection: collection, filter: filter)
    }
}

extension Array where Element == String {
    /// `a`, `a or b`, `a, b or c`.
    func joinedAsAlternatives() -> String {
        switch count {
        case 0: return ""
        case 1: return self[0]
        default: return dropLast().joined(separator: ", ") + " or " + self[count - 1]
        }
    }
}
