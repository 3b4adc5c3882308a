/// A shell-style wildcard pattern over Unicode scalars: `*` matches any run (also empty), `?` one
/// scalar, `\` makes the next character literal; everything else matches itself exactly (no case
/// folding, no normalization, as the peer sent it).
///
/// Matching runs the pattern as a bit-parallel NFA (one bit per pattern position, advanced once
/// per text scalar): time is linear in the text, times the pattern length / 64, whatever the
/// pattern — there is no backtracking, so `*a*a*a*…b` against `aaaa…` costs what `*` does.
public struct Glob: Sendable, CustomStringConvertible {
    /// Longest pattern after collapsing runs of `*` (the state is 256 bits: positions 0...255).
    public static let maxTokens = 255
    /// Longest pattern text accepted, in bytes.
    public static let maxPatternBytes = 1024

    enum Token: Sendable, Equatable {
        case literal(Unicode.Scalar)
        case any
        case star
    }

    public let description: String
    let tokens: [Token]
    /// A pattern with no wildcard compares as plain text.
    let exact: String?
    /// Positions holding `*`.
    let starMask: Bits
    /// Positions holding `?`.
    let anyMask: Bits
    /// For each literal scalar of the pattern, the positions holding it.
    let literalMasks: [Unicode.Scalar: Bits]

    public init(_ pattern: String) throws(GlobError) {
        guard pattern.utf8.count <= Self.maxPatternBytes else { throw .tooLong(bytes: pattern.utf8.count, limit: Self.maxPatternBytes) }
        var tokens: [Token] = []
        var escaped = false
        for s in pattern.unicodeScalars {
            if escaped {
                tokens.append(.literal(s))
                escaped = false
            } else if s == "\\" {
                escaped = true
            } else if s == "*" {
                if tokens.last != .star { tokens.append(.star) }  // `**` is `*`
            } else if s == "?" {
                tokens.append(.any)
            } else {
                tokens.append(.literal(s))
            }
        }
        guard !escaped else { throw .danglingEscape }
        guard tokens.count <= Self.maxTokens else { throw .tooManyTokens(tokens.count, limit: Self.maxTokens) }
        description = pattern
        self.tokens = tokens
        exact = tokens.allSatisfy { if case .literal = $0 { true } else { false } }
            ? String(String.UnicodeScalarView(tokens.compactMap { if case .literal(let s) = $0 { s } else { nil } })) : nil
        var star = Bits(), any = Bits(), literals: [Unicode.Scalar: Bits] = [:]
        for (i, t) in tokens.enumerated() {
            switch t {
            case .star: star.set(i)
            case .any: any.set(i)
            case .literal(let s): literals[s, default: Bits()].set(i)
            }
        }
        starMask = star
        anyMask = any
        literalMasks = literals
    }

    public func matches(_ text: String) -> Bool {
        if let exact { return exact.unicodeScalars.elementsEqual(text.unicodeScalars) }
        var state = closure(Bits(bit: 0))
        for s in text.unicodeScalars {
            // Positions before a `*` stay (it absorbs s); positions before `?` or a literal equal
            // to s move past it.
            let consuming = anyMask.or(literalMasks[s] ?? Bits())
            let advanced = state.and(consuming).shiftedLeftByOne()
            state = closure(advanced.or(state.and(starMask)))
            if state.isEmpty { return false }
        }
        return state.test(tokens.count)
    }

    /// A position before `*` may also skip it (the `*` matching nothing). Runs of `*` were
    /// collapsed, so one shift reaches every position a skip can.
    private func closure(_ s: Bits) -> Bits { s.or(s.and(starMask).shiftedLeftByOne()) }
}

public enum GlobError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLong(bytes: Int, limit: Int)
    case tooManyTokens(Int, limit: Int)
    case danglingEscape

    public var description: String {
        switch self {
        case .tooLong(let n, let limit): "pattern of \(n) bytes (at most \(limit))"
        case .tooManyTokens(let n, let limit): "pattern of \(n) characters and wildcards (at most \(limit))"
        case .danglingEscape: "pattern ends with an unfinished escape (\\)"
        }
    }
}

/// 256 bits: the NFA state of a `Glob`.
struct Bits: Sendable, Equatable {
    var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0

    init() {}
    init(bit: Int) { set(bit) }

    mutating func set(_ i: Int) {
        let mask = UInt64(1) << UInt64(i & 63)
        switch i >> 6 {
        case 0: w0 |= mask
        case 1: w1 |= mask
        case 2: w2 |= mask
        default: w3 |= mask
        }
    }

    func test(_ i: Int) -> Bool {
        let word: UInt64
        switch i >> 6 {
        case 0: word = w0
        case 1: word = w1
        case 2: word = w2
        default: word = w3
        }
        return word & (UInt64(1) << UInt64(i & 63)) != 0
    }

    var isEmpty: Bool { w0 | w1 | w2 | w3 == 0 }

    func and(_ o: Bits) -> Bits {
        var r = Bits()
        r.w0 = w0 & o.w0; r.w1 = w1 & o.w1; r.w2 = w2 & o.w2; r.w3 = w3 & o.w3
        return r
    }

    func or(_ o: Bits) -> Bits {
        var r = Bits()
        r.w0 = w0 | o.w0; r.w1 = w1 | o.w1; r.w2 = w2 | o.w2; r.w3 = w3 | o.w3
        return r
    }

    func shiftedLeftByOne() -> Bits {
        var r = Bits()
        r.w0 = w0 << 1
        r.w1 = w1 << 1 | w0 >> 63
        r.w2 = w2 << 1 | w1 >> 63
        r.w3 = w3 << 1 | w2 >> 63
        return r
    }
}
