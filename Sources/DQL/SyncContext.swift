// `SYNC CONTEXT (PEERS [WHERE condition]) SELECT ...`: a SELECT to run on connected peers rather
// than on the server's store (docs/DQL.md, "SYNC CONTEXT"; POST /api/v4/sync/remote_execute).
// The condition is an ordinary DQL expression, evaluated against each connected peer as a
// document of its presence fields (`peerKey`, `deviceName`, `os`, `sdkVersion`, `peerMetadata`);
// without WHERE every connected peer is meant. It is its own top-level statement: `DQL.parse`
// refuses it (no store runs it), `DQL.parseSyncContext` accepts it.
//
//   sync_context_statement = SYNC CONTEXT "(" PEERS [ WHERE expression ] ")" select_statement [ ";" ]

public struct SyncContextStatement: Sendable, Hashable {
    /// Which connected peers run the SELECT; nil: all of them.
    public var peers: Expression?
    public var select: SelectStatement

    public init(peers: Expression?, select: SelectStatement) {
        self.peers = peers
        self.select = select
    }
}

extension SyncContextStatement: CustomStringConvertible {
    public var description: String { Printer.print(self) }
}

extension DQL {
    /// Parses `SYNC CONTEXT (PEERS [WHERE condition]) SELECT ...`.
    public static func parseSyncContext(_ text: String, limits: DQLParseLimits = .default) throws(DQLSyntaxError) -> SyncContextStatement {
        guard text.utf8.count <= limits.maxStatementBytes else {
            throw DQLSyntaxError(location: SourceLocation(line: 1, column: 1, offset: 0),
                                 found: "a statement of \(text.utf8.count) bytes", expected: "at most \(limits.maxStatementBytes) bytes")
        }
        var parser = Parser(tokens: try Lexer.tokenize(text), limits: limits)
        let statement = try parser.parseSyncContext()
        let terminated = parser.skip(.semicolon)
        try parser.expectEnd(clauses: terminated ? [] : parser.followingClauses)
        return statement
    }
}

extension Parser {
    mutating func parseSyncContext() throws(DQLSyntaxError) -> SyncContextStatement {
        try expectWord("SYNC")
        try expectWord("CONTEXT")
        try expect(.leftParen, "'('")
        try expectWord("PEERS")
        var peers: Expression?
        if skip(.where) { peers = try parseExpression() }
        try expect(.rightParen, peers == nil ? "WHERE or ')'" : "')'")
        guard at(.select) else { throw error(expected: "SELECT (only a SELECT runs on peers)") }
        return SyncContextStatement(peers: peers, select: try parseSelect())
    }
}

extension Printer {
    public static func print(_ s: SyncContextStatement) -> String {
        var out = "SYNC CONTEXT (PEERS"
        if let p = s.peers { out += " WHERE " + print(p) }
        out += ") "
        writeSelect(s.select, into: &out)
        return out
    }
}
