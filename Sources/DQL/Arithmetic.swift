// Arithmetic without silent precision loss.
//
//   int  op int    -> int, exactly; overflow raises numericOverflow (no silent promotion to double)
//   int  /  int    -> int when the division is exact, otherwise double (7 / 2 = 3.5, 6 / 3 = 2)
//   any  op double -> double; a non-finite result raises numericOverflow
//   x / 0, x % 0   -> NULL
//   %              -> remainder with the sign of the dividend (truncated division)
//   non-numbers    -> NULL

import Values

enum Arithmetic {
    static func unary(_ op: UnaryOperator, _ v: Value) throws(DQLEvaluationError) -> Value? {
        switch (op, v) {
        case (.plus, .int), (.plus, .double): return v
        case (.negate, .int(let i)):
            let (r, o) = Int64(0).subtractingReportingOverflow(i)
            if o { throw .numericOverflow("-(\(i))") }
            return .int(r)
        case (.negate, .double(let d)): return .double(-d)
        default: return .null
        }
    }

    static func binary(_ op: BinaryOperator, _ a: Value, _ b: Value) throws(DQLEvaluationError) -> Value? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return try ints(op, x, y)
        case (.int(let x), .double(let y)): return try doubles(op, Double(x), y)
        case (.double(let x), .int(let y)): return try doubles(op, x, Double(y))
        case (.double(let x), .double(let y)): return try doubles(op, x, y)
        default: return .null
        }
    }

    static func ints(_ op: BinaryOperator, _ x: Int64, _ y: Int64) throws(DQLEvaluationError) -> Value? {
        let r: (partialValue: Int64, overflow: Bool)
        switch op {
        case .add: r = x.addingReportingOverflow(y)
        case .subtract: r = x.subtractingReportingOverflow(y)
        case .multiply: r = x.multipliedReportingOverflow(by: y)
        case .divide:
            if y == 0 { return .null }
            let q = x.dividedReportingOverflow(by: y)
            if q.overflow { throw .numericOverflow("\(x) / \(y)") }
            if x.remainderReportingOverflow(dividingBy: y).partialValue == 0 { return .int(q.partialValue) }
            return .double(Double(x) / Double(y))
        case .modulo:
            if y == 0 { return .null }
            return .int(x.remainderReportingOverflow(dividingBy: y).partialValue)
        default: return .null
        }
        if r.overflow { throw .numericOverflow("\(x) \(op.rawValue) \(y)") }
        return .int(r.partialValue)
    }

    static func doubles(_ op: BinaryOperator, _ x: Double, _ y: Double) throws(DQLEvaluationError) -> Value? {
        let r: Double
        switch op {
        case .add: r = x + y
        case .subtract: r = x - y
        case .multiply: r = x * y
        case .divide:
            if y == 0 { return .null }
            r = x / y
        case .modulo:
            if y == 0 { return .null }
            r = x.truncatingRemainder(dividingBy: y)
        default: return .null
        }
        guard r.isFinite else { throw .numericOverflow("\(x) \(op.rawValue) \(y)") }
        return .double(r)
    }
}

/// A LIKE pattern: `%` any run of characters, `_` exactly one, the escape character (default `\`)
/// makes the next character literal. Characters are Unicode scalars, as in PostgreSQL.
struct LikePattern {
    enum Element: Equatable { case literal(Unicode.Scalar), one, any }
    let elements: [Element]

    /// Longest pattern accepted: matching is O(text x pattern) in the worst case.
    static let maxPatternScalars = 4096

    init(_ pattern: String, escape: String) throws(DQLEvaluationError) {
        guard pattern.unicodeScalars.count <= Self.maxPatternScalars else {
            throw .invalidArgument(function: "LIKE", reason: "pattern longer than \(Self.maxPatternScalars) characters")
        }
        let esc = escape.unicodeScalars.first
        guard escape.unicodeScalars.count == 1 else {
            throw .invalidArgument(function: "LIKE ... ESCAPE", reason: "the escape must be exactly one character")
        }
        var out: [Element] = []
        var escaped = false
        for ch in pattern.unicodeScalars {
            if escaped { out.append(.literal(ch)); escaped = false; continue }
            if ch == esc { escaped = true; continue }
            switch ch {
            case "%": if out.last != .any { out.append(.any) }
            case "_": out.append(.one)
            default: out.append(.literal(ch))
            }
        }
        if escaped { throw .invalidLikePattern(pattern) }
        elements = out
    }

    /// LIKE matching without backtracking. The pattern is cut at each `%` into segments of
    /// literals and `_`; a match must begin with the first segment (unless the pattern begins with
    /// `%`), end with the last (unless it ends with `%`), and contain the others in order. Taking
    /// each middle segment at its leftmost occurrence after the previous one is always right: an
    /// earlier end leaves more text for the rest. Segments of literals are found by KMP, so the
    /// whole match is O(text + pattern); a segment with `_` is searched position by position,
    /// O(text × segment), with every comparison charged to `budget`.
    func matches(_ text: String, caseInsensitive: Bool, budget: EvaluationBudget? = nil) throws(DQLEvaluationError) -> Bool {
        // Converting the text below reads all of it: charged first, so an inline slice of a loop's
        // budget never pays for a conversion it cannot afford (a 4 MiB argument took milliseconds
        // of an event loop before the first step was charged).
        try budget?.charge(text.utf8.count + elements.count)
        let subject = caseInsensitive ? text.lowercased() : text
        let p: [Element] = caseInsensitive ? elements.map { e in
            if case .literal(let c) = e, let l = String(c).lowercased().unicodeScalars.first, String(c).lowercased().unicodeScalars.count == 1 { return .literal(l) }
            return e
        } : elements
        if !p.contains(.one) {
            // Literals and `%` only: UTF-8 is self-synchronizing, so a run of scalars occurs in
            // the text exactly where its bytes do, and the bytes need no decoding.
            let bytes = p.flatMap { e -> [Token<UInt8>] in
                if case .literal(let c) = e { return String(c).utf8.map { .literal($0) } }
                return [.any]
            }
            // The text's own UTF-8 storage, not a copy of it (a 4 MiB argument cost a 4 MiB copy
            // per evaluation).
            var native = subject
            return try native.withUTF8 { text in
                Result { () throws(DQLEvaluationError) -> Bool in try Self.matches(bytes, text, budget: budget) }
            }.get()
        }
        let scalars = p.map { e -> Token<Unicode.Scalar> in
            switch e {
            case .literal(let c): .literal(c)
            case .one: .one
            case .any: .any
            }
        }
        return try Self.matches(scalars, Array(subject.unicodeScalars), budget: budget)
    }

    /// A pattern element over the unit the text is compared in (bytes or scalars).
    enum Token<T: Equatable>: Equatable { case literal(T), one, any }

    @_specialize(where T == UInt8, S == UnsafeBufferPointer<UInt8>)
    @_specialize(where T == Unicode.Scalar, S == [Unicode.Scalar])
    static func matches<T: Equatable, S: RandomAccessCollection<T>>(_ p: [Token<T>], _ s: S, budget: EvaluationBudget?) throws(DQLEvaluationError) -> Bool
    where S.Index == Int {
        let segments = p.split(separator: .any, omittingEmptySubsequences: true).map(Array.init)
        guard p.contains(.any) else {
            return s.count == p.count && matchesAt(0, p, s)
        }
        var lo = 0, hi = s.count
        var middle = segments[...]
        if p.first != .any, let first = middle.popFirst() {
            guard first.count <= hi - lo, matchesAt(lo, first, s) else { return false }
            lo += first.count
        }
        if p.last != .any, let last = middle.popLast() {
            guard last.count <= hi - lo, matchesAt(hi - last.count, last, s) else { return false }
            hi -= last.count
        }
        for segment in middle {
            guard let at = try leftmost(segment, in: s, from: lo, to: hi, budget: budget) else { return false }
            lo = at + segment.count
        }
        return true
    }

    static func matchesAt<T: Equatable, S: RandomAccessCollection<T>>(_ at: Int, _ segment: [Token<T>], _ s: S) -> Bool where S.Index == Int {
        for (k, e) in segment.enumerated() {
            if case .literal(let c) = e, s[at + k] != c { return false }
        }
        return true
    }

    /// The first index in `s[from..<to]` where `segment` (no `%`) matches, or nil.
    static func leftmost<T: Equatable, S: RandomAccessCollection<T>>(_ segment: [Token<T>], in s: S, from: Int, to: Int,
                                                                      budget: EvaluationBudget?) throws(DQLEvaluationError) -> Int?
    where S.Index == Int {
        guard segment.count <= to - from else { return nil }
        let literals = segment.compactMap { e -> T? in if case .literal(let c) = e { return c }; return nil }
        if literals.count == segment.count {
            return try SubstringSearch.firstIndex(of: literals, table: SubstringSearch.failureTable(literals), in: s[from..<to], budget: budget)
        }
        var steps = 0
        for at in from...(to - segment.count) {
            steps += segment.count
            if steps >= 4096 { try budget?.charge(steps); steps = 0 }
            if matchesAt(at, segment, s) { try budget?.charge(steps); return at }
        }
        try budget?.charge(steps)
        return nil
    }
}
