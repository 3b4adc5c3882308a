// The regular-expression syntax `regexp_like` accepts (docs/DQL.md, "Regular expressions"), parsed
// to a small AST. The syntax is the common core of RE2, Go's regexp, Rust's regex crate and Swift's
// Regex, read over Unicode scalars:
//
//   alternation   a|b            concatenation  ab            groups   (a) (?:a) (?<name>a)
//   repetition    * + ? {n} {n,} {n,m}, each optionally lazy (`*?`): the same set of matches
//   any scalar    .  (not a newline)  classes  [abc] [^a-z] [\d_-]   perl classes  \d \D \w \W \s \S (ASCII)
//   assertions    ^ $ (whole subject) \A \z \b \B
//   escapes       \n \t \r \f \v \0 \xHH \x{H…} \uHHHH \u{H…}, and `\` before any punctuation
//
// Everything whose matching needs backtracking or more than one pass is refused with a message
// naming it ("backreferences are not supported", ...): backreferences, lookaround, atomic groups,
// possessive quantifiers, conditionals, inline options, Unicode properties, grapheme escapes.
// A refused feature is a 400, never a silently different meaning: anything not listed above that
// another engine might read differently (a `[` inside a class, POSIX classes) is refused too.

/// A parsed regular expression.
indirect enum RegexNode: Equatable, Sendable {
    case empty
    case scalar(Unicode.Scalar)
    /// Any scalar except a newline (`ScalarSet.isNewline`).
    case anyButNewline
    case set(ScalarSet)
    case assertion(RegexAssertion)
    case concat([RegexNode])
    case alternation([RegexNode])
    /// `min` to `max` (nil: unbounded) repetitions.
    case repeatNode(RegexNode, min: Int, max: Int?)
}

enum RegexAssertion: Equatable, Sendable {
    case start, end, wordBoundary, notWordBoundary
}

/// A set of scalars as sorted, non-overlapping closed ranges, possibly negated.
struct ScalarSet: Equatable, Sendable {
    var ranges: [ClosedRange<UInt32>]
    var negated: Bool

    init(ranges: [ClosedRange<UInt32>], negated: Bool) {
        // Sort and merge so `contains` can stop early and equal sets compare equal.
        let sorted = ranges.sorted { $0.lowerBound < $1.lowerBound }
        var merged: [ClosedRange<UInt32>] = []
        for r in sorted {
            if let last = merged.last, r.lowerBound <= last.upperBound || r.lowerBound - 1 == last.upperBound {
                merged[merged.count - 1] = last.lowerBound...max(last.upperBound, r.upperBound)
            } else {
                merged.append(r)
            }
        }
        self.ranges = merged
        self.negated = negated
    }

    func contains(_ s: Unicode.Scalar) -> Bool {
        let v = s.value
        var found = false
        for r in ranges {
            if v < r.lowerBound { break }
            if v <= r.upperBound { found = true; break }
        }
        return found != negated
    }

    static let digit: [ClosedRange<UInt32>] = [0x30...0x39]
    static let word: [ClosedRange<UInt32>] = [0x30...0x39, 0x41...0x5A, 0x5F...0x5F, 0x61...0x7A]
    /// `\s`: space, \t \n \v \f \r.
    static let space: [ClosedRange<UInt32>] = [0x09...0x0D, 0x20...0x20]

    /// What `.` does not match: \n \v \f \r, NEL, LINE and PARAGRAPH SEPARATOR (as Swift's
    /// `Regex`, the engine `regexp_like` used before, so `.` keeps its meaning).
    static func isNewline(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x0A...0x0D, 0x85, 0x2028, 0x2029: true
        default: false
        }
    }

    static func isWord(_ s: Unicode.Scalar?) -> Bool {
        guard let v = s?.value else { return false }
        return (0x30...0x39).contains(v) || (0x41...0x5A).contains(v) || v == 0x5F || (0x61...0x7A).contains(v)
    }
}

/// Why a pattern was refused; `description` is the client's message.
struct RegexSyntaxError: Error, Equatable, CustomStringConvertible {
    var message: String
    /// Position in Unicode scalars (0-based) where the problem was found.
    var offset: Int
    var description: String { "\(message) at position \(offset + 1)" }
}

/// Recursive-descent parser over the pattern's scalars. Nesting depth is bounded, so a pattern of
/// thousands of `(` fails with a message rather than exhausting the stack.
struct RegexParser {
    static let maxNesting = 100
    /// Largest `n`/`m` in `{n,m}` (RE2's limit too); the compiled size is bounded separately.
    static let maxRepeatCount = 1000

    private let scalars: [Unicode.Scalar]
    private var i = 0
    private var depth = 0

    static func parse(_ pattern: String) throws(RegexSyntaxError) -> RegexNode {
        var p = RegexParser(scalars: Array(pattern.unicodeScalars))
        let node = try p.parseAlternation()
        if p.i < p.scalars.count {
            // Only an unbalanced `)` stops the top level early.
            throw p.error("unmatched ')'")
        }
        return node
    }

    private init(scalars: [Unicode.Scalar]) { self.scalars = scalars }

    private func error(_ message: String) -> RegexSyntaxError { RegexSyntaxError(message: message, offset: i) }
    private var peek: Unicode.Scalar? { i < scalars.count ? scalars[i] : nil }
    private func peek(_ k: Int) -> Unicode.Scalar? { i + k < scalars.count ? scalars[i + k] : nil }

    private mutating func parseAlternation() throws(RegexSyntaxError) -> RegexNode {
        var branches = [try parseConcat()]
        while peek == "|" {
            i += 1
            branches.append(try parseConcat())
        }
        return branches.count == 1 ? branches[0] : .alternation(branches)
    }

    private mutating func parseConcat() throws(RegexSyntaxError) -> RegexNode {
        var items: [RegexNode] = []
        while let c = peek, c != "|", c != ")" {
            var atom = try parseAtom()
            atom = try parseQuantifiers(atom)
            items.append(atom)
        }
        switch items.count {
        case 0: return .empty
        case 1: return items[0]
        default: return .concat(items)
        }
    }

    private mutating func parseQuantifiers(_ atom: RegexNode) throws(RegexSyntaxError) -> RegexNode {
        var node = atom
        var quantified = false
        while let c = peek {
            let bounds: (Int, Int?)
            switch c {
            case "*": bounds = (0, nil); i += 1
            case "+": bounds = (1, nil); i += 1
            case "?": bounds = (0, 1); i += 1
            case "{":
                guard let b = try parseBraces() else { return node }  // not a quantifier: a literal `{`
                bounds = b
            default: return node
            }
            if quantified { throw error("a quantifier cannot follow another quantifier (nest it in a group)") }
            if case .empty = node { throw error("nothing to repeat") }
            quantified = true
            if peek == "?" {
                i += 1  // lazy: the same set of matching subjects
            } else if peek == "+" {
                throw error("possessive quantifiers are not supported")
            }
            node = .repeatNode(node, min: bounds.0, max: bounds.1)
        }
        return node
    }

    /// `{n}`, `{n,}`, `{n,m}`; nil (and nothing consumed) when the brace does not start one, in
    /// which case it is a literal, as in the other engines.
    private mutating func parseBraces() throws(RegexSyntaxError) -> (Int, Int?)? {
        let start = i
        i += 1
        func number(_ p: inout RegexParser) -> Int? {
            var n = 0, digits = 0
            while let c = p.peek, let d = c.properties.numericType == .decimal && c.isASCII ? Int(c.value - 0x30) : nil {
                n = min(n * 10 + d, Int(Int32.max))
                digits += 1
                p.i += 1
            }
            return digits > 0 ? n : nil
        }
        guard let lo = number(&self) else {
            if peek == ",", peek(1).map({ $0.isASCII && $0.properties.numericType == .decimal }) == true {
                throw error("write {0,n} for 'at most n' (engines disagree on {,n})")
            }
            i = start
            return nil
        }
        var hi: Int? = lo
        if peek == "," {
            i += 1
            hi = number(&self)
        }
        guard peek == "}" else { i = start; return nil }
        i += 1
        guard lo <= Self.maxRepeatCount, (hi ?? 0) <= Self.maxRepeatCount else {
            i = start
            throw error("repetition count above \(Self.maxRepeatCount)")
        }
        if let hi, hi < lo { i = start; throw error("repetition {\(lo),\(hi)} has its maximum below its minimum") }
        return (lo, hi)
    }

    private mutating func parseAtom() throws(RegexSyntaxError) -> RegexNode {
        guard let c = peek else { throw error("unexpected end of pattern") }
        switch c {
        case "(":
            return try parseGroup()
        case "[":
            return .set(try parseClass())
        case ".":
            i += 1
            return .anyButNewline
        case "^":
            i += 1
            return .assertion(.start)
        case "$":
            i += 1
            return .assertion(.end)
        case "\\":
            return try parseEscape(inClass: false)
        case "*", "+", "?":
            throw error("nothing to repeat before '\(c)'")
        default:
            i += 1
            return .scalar(c)
        }
    }

    private mutating func parseGroup() throws(RegexSyntaxError) -> RegexNode {
        let open = i
        i += 1
        if peek == "?" {
            switch (peek(1), peek(2)) {
            case (":"?, _): i += 2
            case ("<"?, "="?), ("<"?, "!"?), ("="?, _), ("!"?, _), ("*"?, _):
                throw error("lookaround is not supported")
            case ("<"?, _), ("P"?, "<"?), ("'"?, _):
                // A named group: the name does not change what matches.
                i += peek(1) == "P" ? 3 : 2
                let close: Unicode.Scalar = scalars[i - 1] == "'" ? "'" : ">"
                var nameLength = 0
                while let n = peek, n != close {
                    guard n == "_" || (n.isASCII && (n.properties.isAlphabetic || n.properties.numericType == .decimal)) else {
                        throw error("invalid group name")
                    }
                    i += 1
                    nameLength += 1
                }
                guard peek == close, nameLength > 0 else { throw error("invalid group name") }
                i += 1
            case (">"?, _): throw error("atomic groups are not supported")
            case ("("?, _): throw error("conditionals are not supported")
            case ("#"?, _): throw error("comments are not supported")
            default: throw error("inline options and other (? groups are not supported")
            }
        }
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maxNesting else { throw error("groups nested deeper than \(Self.maxNesting)") }
        let inner = try parseAlternation()
        guard peek == ")" else { throw RegexSyntaxError(message: "unmatched '('", offset: open) }
        i += 1
        return inner
    }

    private mutating func parseClass() throws(RegexSyntaxError) -> ScalarSet {
        let open = i
        i += 1
        var negated = false
        if peek == "^" { negated = true; i += 1 }
        var ranges: [ClosedRange<UInt32>] = []
        var first = true
        while true {
            guard let c = peek else { throw RegexSyntaxError(message: "unmatched '['", offset: open) }
            if c == "]" && !first { i += 1; break }
            if c == "]" { throw error("an empty character class is not supported (write \\] for a literal ])") }
            first = false
            if c == "[" { throw error("'[' inside a character class is not supported (write \\[; POSIX classes and set operations are not supported)") }
            if c == "&" && peek(1) == "&" || c == "-" && peek(1) == "-" || c == "~" && peek(1) == "~" {
                throw error("set operations in a character class are not supported (escape the character)")
            }
            let lo: Unicode.Scalar
            if c == "\\" {
                switch try parseEscape(inClass: true) {
                case .scalar(let s): lo = s
                case .set(let s): ranges += s.negated ? Self.complement(s.ranges) : s.ranges; continue
                default: throw error("this escape is not allowed in a character class")
                }
            } else {
                lo = c
                i += 1
            }
            // A range `a-z`, unless the `-` is last (then it is a literal).
            if peek == "-", let next = peek(1), next != "]" {
                i += 1
                let hi: Unicode.Scalar
                if next == "\\" {
                    guard case .scalar(let s) = try parseEscape(inClass: true) else { throw error("a class like \\d cannot end a range") }
                    hi = s
                } else if next == "[" {
                    throw error("'[' inside a character class is not supported (write \\[)")
                } else {
                    hi = next
                    i += 1
                }
                guard lo.value <= hi.value else { throw error("range \(lo)-\(hi) is out of order") }
                ranges.append(lo.value...hi.value)
            } else {
                ranges.append(lo.value...lo.value)
            }
        }
        return ScalarSet(ranges: ranges, negated: negated)
    }

    static func complement(_ ranges: [ClosedRange<UInt32>]) -> [ClosedRange<UInt32>] {
        var out: [ClosedRange<UInt32>] = []
        var next: UInt32 = 0
        for r in ScalarSet(ranges: ranges, negated: false).ranges {
            if r.lowerBound > next { out.append(next...(r.lowerBound - 1)) }
            guard r.upperBound < 0x10FFFF else { return out }
            next = r.upperBound + 1
        }
        out.append(next...0x10FFFF)
        return out
    }

    /// An escape at `\`: a scalar, a perl class, or (outside classes) an assertion.
    private mutating func parseEscape(inClass: Bool) throws(RegexSyntaxError) -> RegexNode {
        i += 1
        guard let c = peek else { throw error("the pattern ends with '\\'") }
        i += 1
        switch c {
        case "n": return .scalar("\n")
        case "t": return .scalar("\t")
        case "r": return .scalar("\r")
        case "f": return .scalar("\u{0C}")
        case "v": return .scalar("\u{0B}")
        case "a": return .scalar("\u{07}")
        case "e": return .scalar("\u{1B}")
        case "0":
            if let d = peek, ("0"..."7").contains(d) { throw error("octal escapes are not supported (use \\x{…})") }
            return .scalar("\0")
        case "d": return .set(ScalarSet(ranges: ScalarSet.digit, negated: false))
        case "D": return .set(ScalarSet(ranges: ScalarSet.digit, negated: true))
        case "w": return .set(ScalarSet(ranges: ScalarSet.word, negated: false))
        case "W": return .set(ScalarSet(ranges: ScalarSet.word, negated: true))
        case "s": return .set(ScalarSet(ranges: ScalarSet.space, negated: false))
        case "S": return .set(ScalarSet(ranges: ScalarSet.space, negated: true))
        case "x", "u":
            return .scalar(try parseHexEscape(c))
        case "A" where !inClass: return .assertion(.start)
        case "z" where !inClass: return .assertion(.end)
        case "b" where !inClass: return .assertion(.wordBoundary)
        case "B" where !inClass: return .assertion(.notWordBoundary)
        case "1"..."9", "k", "g":
            throw error("backreferences are not supported")
        default:
            // Any ASCII punctuation or symbol stands for itself; letters and digits are reserved
            // (other engines give them meanings we do not implement).
            if c.isASCII, !c.properties.isAlphabetic, c.properties.numericType == nil, c.value > 0x20 {
                return .scalar(c)
            }
            throw error("the escape \\\(c) is not supported")
        }
    }

    private mutating func parseHexEscape(_ kind: Unicode.Scalar) throws(RegexSyntaxError) -> Unicode.Scalar {
        var digits = ""
        if peek == "{" {
            i += 1
            while let d = peek, d != "}" { digits.unicodeScalars.append(d); i += 1; if digits.count > 8 { break } }
            guard peek == "}" else { throw error("unterminated \\\(kind){…} escape") }
            i += 1
        } else {
            let count = kind == "x" ? 2 : 4
            for _ in 0..<count {
                guard let d = peek else { break }
                digits.unicodeScalars.append(d)
                i += 1
            }
        }
        guard !digits.isEmpty, digits.unicodeScalars.allSatisfy(\.properties.isASCIIHexDigit),
              let v = UInt32(digits, radix: 16), let s = Unicode.Scalar(v) else {
            throw error("invalid \\\(kind) escape (hex digits naming a Unicode scalar expected)")
        }
        return s
    }
}
