// Tokens of DQL and where they sit in the source. Modelled on GraphQLSwift's Language/Token:
// a token carries its kind, its decoded payload and its 1-based line/column, so every
// syntax error can point at the exact offending token.

/// A position in a DQL statement: 1-based line and column (columns count Unicode scalars),
/// and the 0-based UTF-8 byte offset.
public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var offset: Int

    public init(line: Int, column: Int, offset: Int) {
        self.line = line
        self.column = column
        self.offset = offset
    }

    public var description: String { "line \(line), column \(column)" }
}

/// Reserved words: these can never be bare identifiers (quote them with backticks).
/// Every other keyword of DQL (DOCUMENTS, VALUES, COUNT, INDEX, SYSTEM, ...) is contextual:
/// it is an identifier everywhere except the one place the grammar expects it, so fields may be
/// called `count` or `index` without quoting.
public enum Keyword: String, Sendable, Hashable, CaseIterable {
    case select = "SELECT", distinct = "DISTINCT", from = "FROM", `where` = "WHERE", group = "GROUP", by = "BY"
    case having = "HAVING", order = "ORDER", asc = "ASC", desc = "DESC", limit = "LIMIT", offset = "OFFSET"
    case and = "AND", or = "OR", not = "NOT", `in` = "IN", `is` = "IS", null = "NULL", `true` = "TRUE"
    case `false` = "FALSE", missing = "MISSING", like = "LIKE", ilike = "ILIKE", between = "BETWEEN", `as` = "AS"
    case insert = "INSERT", into = "INTO", update = "UPDATE", set = "SET", unset = "UNSET", delete = "DELETE"
    case evict = "EVICT", apply = "APPLY", on = "ON", escape = "ESCAPE"

    /// Looks a word up case-insensitively. Every keyword has at most 8 ASCII letters, so the
    /// upper-cased word packs into a UInt64 and the lookup allocates nothing.
    static func lookup<C: Collection>(_ word: C) -> Keyword? where C.Element == UInt8 {
        guard let key = packed(word) else { return nil }
        return table[key]
    }

    static func lookup(_ word: Substring) -> Keyword? { lookup(word.utf8) }

    @inline(__always) static func packed<C: Collection>(_ word: C) -> UInt64? where C.Element == UInt8 {
        guard word.count >= 2, word.count <= 8 else { return nil }
        var key: UInt64 = 0
        for b in word {
            let upper = (b >= 0x61 && b <= 0x7A) ? b - 0x20 : b
            key = key << 8 | UInt64(upper)
        }
        return key
    }

    private static let table: [UInt64: Keyword] = {
        var t: [UInt64: Keyword] = [:]
        for k in Keyword.allCases { if let key = packed(k.rawValue.utf8) { t[key] = k } }
        return t
    }()
}

public enum TokenKind: Sendable, Hashable {
    case endOfInput
    /// An unquoted word that is not reserved; `text` holds it as written.
    case identifier
    /// A backtick-quoted identifier; `text` holds the decoded name. Never a keyword.
    case quotedIdentifier
    case keyword(Keyword)
    /// A numeric literal; `text` holds its digits. Converted by the parser, which folds a leading
    /// minus sign in first so that `-9223372036854775808` is an exact integer.
    case number(isInteger: Bool)
    case string
    /// `:name`; `text` holds the name.
    case parameter
    case leftParen, rightParen, leftBracket, rightBracket, leftBrace, rightBrace
    case comma, dot, colon, semicolon, star, plus, minus, slash, percent, concat
    case equal, notEqual, less, lessEqual, greater, greaterEqual
}

public struct Token: Sendable, Hashable {
    public var kind: TokenKind
    /// Decoded text for identifiers, strings and parameters; the source text otherwise.
    public var text: String
    public var location: SourceLocation

    /// How the token is quoted in an error message (long text is shortened: errors go back to clients).
    public var errorDescription: String {
        let shown = text.unicodeScalars.count > 40 ? String(String.UnicodeScalarView(text.unicodeScalars.prefix(40))) + "..." : text
        switch kind {
        case .endOfInput: return "end of input"
        case .string: return "string '\(shown)'"
        case .parameter: return "parameter :\(shown)"
        case .quotedIdentifier: return "identifier `\(shown)`"
        case .identifier: return "'\(shown)'"
        case .keyword(let k): return "keyword \(k.rawValue)"
        default: return "'\(shown)'"
        }
    }

    /// True when this is an unquoted word equal (ignoring case) to `word` — how contextual
    /// keywords such as DOCUMENTS or INDEX are recognised.
    func isWord(_ word: String) -> Bool {
        guard case .identifier = kind, text.utf8.count == word.utf8.count else { return false }
        return text.uppercased() == word
    }
}
