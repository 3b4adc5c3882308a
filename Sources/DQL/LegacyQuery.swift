import Quoting
import Values

/// Translates a Ditto legacy query (the `query` of `/api/v4/store/find`, `/count`, and the
/// legacy `/write` commands) into a DQL condition.
///
///     legacy                         DQL
///     a.b == 'x'                     (`a`.`b` = :lq0)          strings become parameters
///     n != 3 && m >= 2.5             ((`n` != 3) AND (`m` >= 2.5))
///     x == null / x != null          (`x` IS NULL OR `x` IS MISSING) / the negation
///     !(a || b)                      (NOT ((`a`) OR (`b`)))
///     name == $args.name             (`name` = :lq1)           lq1 = args["name"]
///     $args.filter.min               :lq2                      nested argument paths resolve here
///     contains(tags, 'red')          array_contains(`tags`, :lq3)
///     starts_with / ends_with        same name
///     regex_match(s, 'p')            regexp_like(`s`, :lq4)
///     tags[0], a['k']                `tags`[0], `a`.`k`
///     true / (empty query)           true
///
/// Every string literal and every `$args` reference becomes a named parameter of the output, so
/// no client text is ever spliced into DQL except identifiers (always backtick-quoted, with
/// backticks doubled) and number lexemes (validated digits). Grammar, lowest precedence first:
///
///     query      = or
///     or         = and *( "||" and )
///     and        = unary *( "&&" unary )
///     comparison = unary [ ( "==" / "!=" / "<" / "<=" / ">" / ">=" ) unary ]
///     unary      = "!" unary / primary          (JavaScript precedence: "!" binds tightest)
///     primary    = literal / path / "$args" 1*("." name) / name "(" [args] ")" / "(" query ")" / "[" [args] "]"
public enum LegacyQuery {
    /// The DQL condition and the parameters it uses (only those it made: `lq0`, `lq1`, …).
    public struct Translation: Sendable, Equatable {
        public var condition: String
        public var arguments: [String: Value]
    }

    public static let maxQueryBytes = 64 << 10
    static let maxDepth = 64

    /// Translates `query` (nil or blank: matches everything) with its `$args`.
    public static func translate(_ query: String?, arguments: [String: Value] = [:]) throws(LegacyQueryError) -> Translation {
        guard let query, query.contains(where: { !$0.isWhitespace }) else { return Translation(condition: "true", arguments: [:]) }
        guard query.utf8.count <= maxQueryBytes else { throw LegacyQueryError("the query is longer than \(maxQueryBytes) bytes", at: 0) }
        var p = LegacyQueryParser(text: Array(query.utf8), arguments: arguments)
        let condition = try p.parseOr(depth: 0)
        p.skipSpace()
        guard p.pos == p.text.count else { throw p.error("expected && or || or the end of the query") }
        return Translation(condition: condition, arguments: p.output)
    }

    /// A field path in legacy syntax (`a.b`, `tags[0]`, `a['odd key']`) as a DQL path.
    public static func translatePath(_ path: String) throws(LegacyQueryError) -> String {
        var p = LegacyQueryParser(text: Array(path.utf8), arguments: [:])
        guard path.utf8.count <= 4096, let first = p.text.first, LegacyQueryParser.isNameStart(first) else {
            throw LegacyQueryError("expected a field path such as name, a.b or tags[0]", at: 0)
        }
        let out = try p.parsePathRest(quoteIdentifier(p.parseName()))
        guard p.pos == p.text.count else { throw p.error("unexpected text after the field path") }
        return out
    }

    /// A DQL identifier, backtick-quoted (backticks doubled), so any name is safe to splice.
    public static func quoteIdentifier(_ name: String) -> String {
        Quote.dqlIdentifier(name)
    }
}

/// A legacy query that cannot be translated: what and where (1-based column).
public struct LegacyQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public var column: Int
    init(_ message: String, at offset: Int) {
        self.message = message
        self.column = offset + 1
    }
    public var description: String { "legacy query error at column \(column): \(message)" }
}

struct LegacyQueryParser {
    let text: [UInt8]
    let arguments: [String: Value]
    var pos = 0
    var output: [String: Value] = [:]

    init(text: [UInt8], arguments: [String: Value]) {
        self.text = text
        self.arguments = arguments
    }

    func error(_ m: String) -> LegacyQueryError { LegacyQueryError(m, at: pos) }

    mutating func skipSpace() {
        while pos < text.count, text[pos] == 0x20 || text[pos] == 0x09 || text[pos] == 0x0A || text[pos] == 0x0D { pos += 1 }
    }

    /// Consumes `token` (after spaces) if it is next.
    mutating func take(_ token: String) -> Bool {
        skipSpace()
        let t = Array(token.utf8)
        guard text.count - pos >= t.count, text[pos..<(pos + t.count)].elementsEqual(t) else { return false }
        pos += t.count
        return true
    }

    mutating func parameter(_ v: Value) -> String {
        let name = "lq\(output.count)"
        output[name] = v
        return ":" + name
    }

    mutating func parseOr(depth: Int) throws(LegacyQueryError) -> String {
        guard depth < LegacyQuery.maxDepth else { throw error("the query nests deeper than \(LegacyQuery.maxDepth) levels") }
        var left = try parseAnd(depth: depth)
        while take("||") { left = "(\(left) OR \(try parseAnd(depth: depth)))" }
        return left
    }

    mutating func parseAnd(depth: Int) throws(LegacyQueryError) -> String {
        var left = try parseComparison(depth: depth)
        while take("&&") { left = "(\(left) AND \(try parseComparison(depth: depth)))" }
        return left
    }

    mutating func parseComparison(depth: Int) throws(LegacyQueryError) -> String {
        let (left, leftIsNull) = try parseUnary(depth: depth)
        let ops: [(String, String)] = [("==", "="), ("!=", "!="), ("<=", "<="), (">=", ">="), ("<", "<"), (">", ">")]
        for (legacy, dql) in ops {
            let save = pos
            guard take(legacy) else { continue }
            if legacy == "<" || legacy == ">", pos < text.count, text[pos] == UInt8(ascii: "=") { pos = save; continue }
            let (right, rightIsNull) = try parseUnary(depth: depth)
            if legacy == "==" || legacy == "!=", leftIsNull || rightIsNull {
                let subject = leftIsNull ? right : left
                return legacy == "==" ? "(\(subject) IS NULL OR \(subject) IS MISSING)" : "(\(subject) IS NOT NULL AND \(subject) IS NOT MISSING)"
            }
            return "(\(left) \(dql) \(right))"
        }
        return left
    }

    /// The DQL text and whether it is the literal `null`.
    mutating func parseUnary(depth: Int) throws(LegacyQueryError) -> (String, Bool) {
        skipSpace()
        if pos < text.count, text[pos] == UInt8(ascii: "!"), pos + 1 >= text.count || text[pos + 1] != UInt8(ascii: "=") {
            pos += 1
            guard depth + 1 < LegacyQuery.maxDepth else { throw error("the query nests deeper than \(LegacyQuery.maxDepth) levels") }
            return ("(NOT \(try parseUnary(depth: depth + 1).0))", false)
        }
        return try parsePrimary(depth: depth)
    }

    mutating func parsePrimary(depth: Int) throws(LegacyQueryError) -> (String, Bool) {
        skipSpace()
        guard pos < text.count else { throw error("expected a value, a field or ( but the query ended") }
        let c = text[pos]
        switch c {
        case UInt8(ascii: "("):
            pos += 1
            let inner = try parseOr(depth: depth + 1)
            guard take(")") else { throw error("expected )") }
            return (inner, false)
        case UInt8(ascii: "["):
            pos += 1
            let items = try parseList(closing: "]", depth: depth + 1)
            return ("[" + items.joined(separator: ", ") + "]", false)
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            return (parameter(.string(try parseString())), false)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return (try parseNumber(), false)
        case UInt8(ascii: "$"):
            return (try parseArgument(), false)
        default:
            guard Self.isNameStart(c) else { throw error("unexpected character '\(Unicode.Scalar(c))'") }
            let name = parseName()
            switch name {
            case "true", "false": return (name, false)
            case "null": return ("null", true)
            default: break
            }
            if take("(") { return (try parseCall(name, depth: depth), false) }
            return (try parsePathRest(LegacyQuery.quoteIdentifier(name)), false)
        }
    }

    mutating func parseList(closing: String, depth: Int) throws(LegacyQueryError) -> [String] {
        guard depth < LegacyQuery.maxDepth else { throw error("the query nests deeper than \(LegacyQuery.maxDepth) levels") }
        var items: [String] = []
        if take(closing) { return items }
        repeat { items.append(try parseOr(depth: depth)) } while take(",")
        guard take(closing) else { throw error("expected , or \(closing)") }
        return items
    }

    static let functions = ["contains": "array_contains", "starts_with": "starts_with", "ends_with": "ends_with", "regex_match": "regexp_like"]

    mutating func parseCall(_ name: String, depth: Int) throws(LegacyQueryError) -> String {
        guard let dql = Self.functions[name] else {
            throw error("unknown function \(name) (supported: \(Self.functions.keys.sorted().joined(separator: ", ")))")
        }
        let args = try parseList(closing: ")", depth: depth + 1)
        guard args.count == 2 else { throw error("\(name) takes 2 arguments, not \(args.count)") }
        return "\(dql)(\(args.joined(separator: ", ")))"
    }

    /// `.name` and `[n]` / `['key']` after a field name.
    mutating func parsePathRest(_ head: String) throws(LegacyQueryError) -> String {
        var out = head
        while pos < text.count {
            if text[pos] == UInt8(ascii: ".") {
                pos += 1
                guard pos < text.count, Self.isNameStart(text[pos]) else { throw error("expected a field name after .") }
                out += "." + LegacyQuery.quoteIdentifier(parseName())
            } else if text[pos] == UInt8(ascii: "[") {
                pos += 1
                skipSpace()
                if pos < text.count, text[pos] == UInt8(ascii: "'") || text[pos] == UInt8(ascii: "\"") {
                    out += "." + LegacyQuery.quoteIdentifier(try parseString())
                } else {
                    let start = pos
                    while pos < text.count, text[pos] >= UInt8(ascii: "0"), text[pos] <= UInt8(ascii: "9") { pos += 1 }
                    guard pos > start, pos - start <= 9 else { throw error("expected an array index or a quoted key inside [ ]") }
                    out += "[" + String(decoding: text[start..<pos], as: UTF8.self) + "]"
                }
                guard take("]") else { throw error("expected ]") }
            } else {
                break
            }
        }
        return out
    }

    /// `$args.name.sub…`: resolved now into one parameter (missing argument: an error).
    mutating func parseArgument() throws(LegacyQueryError) -> String {
        let start = pos
        pos += 1
        guard pos < text.count, Self.isNameStart(text[pos]), parseName() == "args" else {
            pos = start
            throw error("expected $args.name")
        }
        var path: [String] = []
        while pos < text.count, text[pos] == UInt8(ascii: ".") {
            pos += 1
            guard pos < text.count, Self.isNameStart(text[pos]) else { throw error("expected an argument name after $args.") }
            path.append(parseName())
        }
        guard let first = path.first else { throw error("expected $args.name") }
        guard var value = arguments[first] else { throw LegacyQueryError("no argument named \(first) in args", at: start) }
        for key in path.dropFirst() {
            guard case .object(let o) = value, let next = o[key] else {
                throw LegacyQueryError("args.\(path.joined(separator: ".")) does not exist", at: start)
            }
            value = next
        }
        return parameter(value)
    }

    mutating func parseName() -> String {
        let start = pos
        while pos < text.count, Self.isNameStart(text[pos]) || (text[pos] >= UInt8(ascii: "0") && text[pos] <= UInt8(ascii: "9")) { pos += 1 }
        return String(decoding: text[start..<pos], as: UTF8.self)
    }

    static func isNameStart(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || c == UInt8(ascii: "_") || c >= 0x80
    }

    /// A number lexeme: `-`? digits [`.` digits] [`e` [`+`/`-`] digits], emitted as written.
    mutating func parseNumber() throws(LegacyQueryError) -> String {
        let start = pos
        func digits() -> Int {
            let s = pos
            while pos < text.count, text[pos] >= UInt8(ascii: "0"), text[pos] <= UInt8(ascii: "9") { pos += 1 }
            return pos - s
        }
        if text[pos] == UInt8(ascii: "-") { pos += 1 }
        guard digits() > 0 else { throw error("expected a number") }
        if pos < text.count, text[pos] == UInt8(ascii: ".") {
            pos += 1
            guard digits() > 0 else { throw error("expected digits after the decimal point") }
        }
        if pos < text.count, text[pos] == UInt8(ascii: "e") || text[pos] == UInt8(ascii: "E") {
            pos += 1
            if pos < text.count, text[pos] == UInt8(ascii: "+") || text[pos] == UInt8(ascii: "-") { pos += 1 }
            guard digits() > 0 else { throw error("expected digits in the exponent") }
        }
        let lexeme = String(decoding: text[start..<pos], as: UTF8.self)
        // Negative numbers go through DQL's unary minus; parenthesised so `a - -1` stays valid.
        return lexeme.hasPrefix("-") ? "(" + lexeme + ")" : lexeme
    }

    /// A quoted string with `\\`, `\'`, `\"`, `\n`, `\t`, `\r`, `\/` and `\uXXXX` escapes.
    mutating func parseString() throws(LegacyQueryError) -> String {
        let quote = text[pos]
        let start = pos
        pos += 1
        var out: [UInt8] = []
        while pos < text.count {
            let c = text[pos]
            pos += 1
            if c == quote {
                guard let s = String(validating: out, as: UTF8.self) else { throw LegacyQueryError("the string is not valid UTF-8", at: start) }
                return s
            }
            guard c == UInt8(ascii: "\\") else { out.append(c); continue }
            guard pos < text.count else { break }
            let e = text[pos]
            pos += 1
            switch e {
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "u"):
                guard text.count - pos >= 4, let v = UInt32(String(decoding: text[pos..<(pos + 4)], as: UTF8.self), radix: 16),
                      let scalar = Unicode.Scalar(v) else { throw error("expected four hex digits after \\u (surrogates are not allowed)") }
                pos += 4
                out.append(contentsOf: Array(String(Character(scalar)).utf8))
            case UInt8(ascii: "\\"), UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "/"): out.append(e)
            default: throw LegacyQueryError("unknown escape \\\(Unicode.Scalar(e))", at: pos - 2)
            }
        }
        throw LegacyQueryError("the string is not closed", at: start)
    }
}
