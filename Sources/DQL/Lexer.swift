// DQL lexer: UTF-8 bytes in, positioned tokens out (the GraphQLSwift Lexer design, as a value type
// that produces the whole token list up front because statements are short).
//
// Lexical rules (docs/DQL.md, "Lexical structure"):
//   whitespace   space, tab, CR, LF
//   comments     `-- to end of line`, `/* block */` (not nested)
//   identifier   [A-Za-z_][A-Za-z0-9_]*        reserved words (Keyword) are case-insensitive
//   quoted ident `any text`                    a backtick inside is written twice: `a``b`
//   string       'text' or "text"               the quote is escaped by doubling it or with a
//                                               backslash; \\ \' \" \/ \n \r \t \b \f \uXXXX; any
//                                               other backslash pair is kept as is ('50\%')
//   number       digits [. digits] [e|E [+|-] digits]
//   parameter    :name
//   punctuation  ( ) [ ] { } , . : ; * + - / % || = == != <> < <= > >=

import Values

struct Lexer {
    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var column = 1

    init(_ source: String) {
        bytes = Array(source.utf8)
    }

    /// Tokenizes the whole statement; the last token is always `.endOfInput`.
    static func tokenize(_ source: String) throws(DQLSyntaxError) -> [Token] {
        var lexer = Lexer(source)
        var tokens: [Token] = []
        tokens.reserveCapacity(lexer.bytes.count / 4 + 2)
        while true {
            let token = try lexer.next()
            tokens.append(token)
            if case .endOfInput = token.kind { return tokens }
        }
    }

    private var location: SourceLocation { SourceLocation(line: line, column: column, offset: index) }

    private func peek(_ ahead: Int = 0) -> UInt8? {
        index + ahead < bytes.count ? bytes[index + ahead] : nil
    }

    /// Consumes one byte, keeping line and column (columns count Unicode scalars, so
    /// UTF-8 continuation bytes do not advance it).
    @inline(__always) private mutating func advance() {
        let b = bytes[index]
        index += 1
        if b == 0x0A {
            line += 1
            column = 1
        } else if b & 0xC0 != 0x80 {
            column += 1
        }
    }

    private func error(_ at: SourceLocation, found: String, expected: String) -> DQLSyntaxError {
        DQLSyntaxError(location: at, found: found, expected: expected)
    }

    private mutating func skipTrivia() throws(DQLSyntaxError) {
        while let b = peek() {
            switch b {
            case 0x20, 0x09, 0x0A, 0x0D:
                advance()
            case UInt8(ascii: "-") where peek(1) == UInt8(ascii: "-"):
                while let c = peek(), c != 0x0A { advance() }
            case UInt8(ascii: "/") where peek(1) == UInt8(ascii: "*"):
                let start = location
                advance(); advance()
                while true {
                    guard let c = peek() else { throw error(start, found: "an unterminated comment", expected: "'*/'") }
                    if c == UInt8(ascii: "*"), peek(1) == UInt8(ascii: "/") { advance(); advance(); break }
                    advance()
                }
            default:
                return
            }
        }
    }

    mutating func next() throws(DQLSyntaxError) -> Token {
        try skipTrivia()
        let start = location
        guard let b = peek() else { return Token(kind: .endOfInput, text: "", location: start) }
        func punct(_ kind: TokenKind, _ length: Int) -> Token {
            let text = String(decoding: bytes[index..<index + length], as: UTF8.self)
            for _ in 0..<length { advance() }
            return Token(kind: kind, text: text, location: start)
        }
        switch b {
        case UInt8(ascii: "("): return punct(.leftParen, 1)
        case UInt8(ascii: ")"): return punct(.rightParen, 1)
        case UInt8(ascii: "["): return punct(.leftBracket, 1)
        case UInt8(ascii: "]"): return punct(.rightBracket, 1)
        case UInt8(ascii: "{"): return punct(.leftBrace, 1)
        case UInt8(ascii: "}"): return punct(.rightBrace, 1)
        case UInt8(ascii: ","): return punct(.comma, 1)
        case UInt8(ascii: ";"): return punct(.semicolon, 1)
        case UInt8(ascii: "."): return punct(.dot, 1)
        case UInt8(ascii: "*"): return punct(.star, 1)
        case UInt8(ascii: "+"): return punct(.plus, 1)
        case UInt8(ascii: "-"): return punct(.minus, 1)
        case UInt8(ascii: "/"): return punct(.slash, 1)
        case UInt8(ascii: "%"): return punct(.percent, 1)
        case UInt8(ascii: "="): return peek(1) == UInt8(ascii: "=") ? punct(.equal, 2) : punct(.equal, 1)
        case UInt8(ascii: "!"):
            if peek(1) == UInt8(ascii: "=") { return punct(.notEqual, 2) }
        case UInt8(ascii: "<"):
            if peek(1) == UInt8(ascii: "=") { return punct(.lessEqual, 2) }
            if peek(1) == UInt8(ascii: ">") { return punct(.notEqual, 2) }
            return punct(.less, 1)
        case UInt8(ascii: ">"):
            return peek(1) == UInt8(ascii: "=") ? punct(.greaterEqual, 2) : punct(.greater, 1)
        case UInt8(ascii: "|"):
            if peek(1) == UInt8(ascii: "|") { return punct(.concat, 2) }
        case UInt8(ascii: ":"):
            if let c = peek(1), isIdentifierStart(c) {
                advance()
                let name = readWord()
                return Token(kind: .parameter, text: String(name), location: start)
            }
            return punct(.colon, 1)
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            return Token(kind: .string, text: try readQuoted(b, start: start), location: start)
        case UInt8(ascii: "`"):
            let name = try readQuoted(b, start: start)
            // Names are compared by Swift as canonically equivalent and by PostgreSQL as bytes:
            // only NFC names without NUL mean the same thing to both (Values/ExactText.swift).
            if let problem = NameRules.problem(name) {
                throw error(start, found: "a quoted name that \(problem)", expected: "a name in Unicode NFC without U+0000")
            }
            return Token(kind: .quotedIdentifier, text: name, location: start)
        case UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try readNumber(start: start)
        default:
            if isIdentifierStart(b) {
                let s = index
                while let c = peek(), isIdentifierPart(c) { advance() }
                let bytesOfWord = bytes[s..<index]
                let text = String(decoding: bytesOfWord, as: UTF8.self)
                if let k = Keyword.lookup(bytesOfWord) { return Token(kind: .keyword(k), text: text, location: start) }
                return Token(kind: .identifier, text: text, location: start)
            }
        }
        throw error(start, found: describeCharacter(at: index), expected: "a token")
    }

    private func describeCharacter(at i: Int) -> String {
        var end = i + 1
        while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return "'" + String(decoding: bytes[i..<end], as: UTF8.self) + "'"
    }

    private func isIdentifierStart(_ b: UInt8) -> Bool {
        (b | 0x20 >= UInt8(ascii: "a") && b | 0x20 <= UInt8(ascii: "z")) || b == UInt8(ascii: "_")
    }

    private func isIdentifierPart(_ b: UInt8) -> Bool {
        isIdentifierStart(b) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
    }

    private mutating func readWord() -> Substring {
        let s = index
        while let c = peek(), isIdentifierPart(c) { advance() }
        return Substring(String(decoding: bytes[s..<index], as: UTF8.self))
    }

    private mutating func readNumber(start: SourceLocation) throws(DQLSyntaxError) -> Token {
        let s = index
        var isInteger = true
        func digits(_ lexer: inout Lexer) -> Bool {
            var any = false
            while let c = lexer.peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { lexer.advance(); any = true }
            return any
        }
        _ = digits(&self)
        if peek() == UInt8(ascii: "."), let c = peek(1), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") {
            isInteger = false
            advance()
            _ = digits(&self)
        }
        if let e = peek(), e | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            advance()
            if let sign = peek(), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { advance() }
            guard digits(&self) else {
                throw error(start, found: "'\(String(decoding: bytes[s..<index], as: UTF8.self))'", expected: "digits after the exponent")
            }
        }
        if let c = peek(), isIdentifierPart(c) {
            throw error(start, found: "'\(String(decoding: bytes[s...index], as: UTF8.self))'", expected: "a number")
        }
        return Token(kind: .number(isInteger: isInteger), text: String(decoding: bytes[s..<index], as: UTF8.self), location: start)
    }

    /// Reads a quoted string or backtick identifier. The quote is escaped by doubling it; strings
    /// (not identifiers) also take backslash escapes.
    private mutating func readQuoted(_ quote: UInt8, start: SourceLocation) throws(DQLSyntaxError) -> String {
        advance()
        var out: [UInt8] = []
        let what = quote == UInt8(ascii: "`") ? "'`' to close the identifier" : "a closing quote"
        while true {
            guard let c = peek() else { throw error(start, found: "an unterminated literal", expected: what) }
            if c == quote {
                advance()
                if peek() == quote { out.append(quote); advance(); continue }
                return String(decoding: out, as: UTF8.self)
            }
            if c == UInt8(ascii: "\\"), quote != UInt8(ascii: "`") {
                try readEscape(into: &out)
                continue
            }
            out.append(c)
            advance()
        }
    }

    private mutating func readEscape(into out: inout [UInt8]) throws(DQLSyntaxError) {
        let at = location
        advance()
        guard let c = peek() else { throw error(at, found: "end of input", expected: "an escape sequence") }
        advance()
        switch c {
        case UInt8(ascii: "\\"), UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "/"): out.append(c)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "u"):
            var v: UInt32 = 0
            for _ in 0..<4 {
                guard let h = peek(), let d = hexValue(h) else {
                    throw error(at, found: "an invalid \\u escape", expected: "four hexadecimal digits")
                }
                v = v << 4 | d
                advance()
            }
            guard let scalar = Unicode.Scalar(v) else {
                throw error(at, found: "a surrogate \\u escape", expected: "a Unicode scalar value (write the character itself)")
            }
            out.append(contentsOf: String(Character(scalar)).utf8)
        default:
            // Any other backslash pair is kept as written, so LIKE patterns such as '100\%' read naturally.
            out.append(UInt8(ascii: "\\"))
            out.append(c)
        }
    }

    private func hexValue(_ b: UInt8) -> UInt32? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(b - UInt8(ascii: "A") + 10)
        default: nil
        }
    }
}
