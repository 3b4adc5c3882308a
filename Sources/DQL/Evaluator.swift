// Expression evaluation over one document. MISSING (an absent field) is `nil`, NULL is `.null`;
// the rules (docs/DQL.md, "Evaluation") in short:
// - A path through anything that is not an object (or, for `[n]`, an array) is MISSING.
// - Operators on MISSING give MISSING, on NULL give NULL (IS [NOT] NULL/MISSING and the type-check
//   functions always give a boolean).
// - AND: false wins, then MISSING, then NULL. OR: true wins, then MISSING, then NULL. NOT keeps
//   MISSING and NULL. A value that is not a boolean counts as NULL in logic; WHERE keeps a row only
//   when the condition is exactly true.
// - `=`/`!=` are false/true across types; `< <= > >=` across types are NULL.
// - Integer arithmetic is exact; a result outside Int64 (or a double result outside the finite range)
//   raises `numericOverflow` rather than losing precision silently. Division or modulo by zero is NULL.

import Values

/// What an expression may refer to besides the document: arguments, the clock, the session's mode.
public struct EvaluationContext: Sendable {
    /// Values for `:name` parameters (the REST `args` object).
    public var arguments: [String: Value]
    /// Milliseconds since the Unix epoch, for `now()`/`clock()`; injected so results are reproducible.
    public var nowMilliseconds: Int64
    /// `DQL_STRICT_MODE`: objects are REGISTERs unless declared MAP.
    public var strictMode: Bool
    /// Largest string or array an expression may build (concatenation, functions).
    public var maxResultBytes: Int
    /// Steps and deadline for in-memory work (nil: unbounded, e.g. a small peer's own queries).
    public var budget: EvaluationBudget?

    public init(arguments: [String: Value] = [:], nowMilliseconds: Int64 = 0, strictMode: Bool = true, maxResultBytes: Int = 16 << 20,
                budget: EvaluationBudget? = nil) {
        self.arguments = arguments
        self.nowMilliseconds = nowMilliseconds
        self.strictMode = strictMode
        self.maxResultBytes = maxResultBytes
        self.budget = budget
    }
}

/// Three-valued truth with MISSING kept apart from NULL.
enum Truth {
    case `true`, `false`, null, missing

    init(_ v: Value?) {
        switch v {
        case nil: self = .missing
        case .bool(true)?: self = .true
        case .bool(false)?: self = .false
        default: self = .null
        }
    }

    var value: Value? {
        switch self {
        case .true: .bool(true)
        case .false: .bool(false)
        case .null: .null
        case .missing: nil
        }
    }
}

public struct Evaluator: Sendable {
    public let context: EvaluationContext
    /// Values of the aggregate sub-expressions for the current group; nil outside grouped evaluation,
    /// where an aggregate is an error.
    var aggregates: [Expression: Value]?

    public init(context: EvaluationContext) {
        self.context = context
    }

    /// Evaluates `expression` against `document` (the whole document, an object); nil is MISSING.
    public func evaluate(_ expression: Expression, in document: Value?) throws(DQLEvaluationError) -> Value? {
        try context.charge(EvaluationBudget.stepsPerNode)
        switch expression {
        case .literal(let v): return v
        case .parameter(let name):
            guard let v = context.arguments[name] else { throw .missingArgument(name) }
            return v
        case .path(let p):
            guard case .object(let o)? = document, var v = o[p.root] else { return nil }
            for c in p.components {
                guard let next = Self.step(v, c) else { return nil }
                v = next
            }
            return v
        case .access(let base, let c):
            guard let v = try evaluate(base, in: document) else { return nil }
            return Self.step(v, c)
        case .array(let items):
            var out: [Value] = []
            out.reserveCapacity(items.count)
            for item in items { out.append(try evaluate(item, in: document) ?? .null) }
            return .array(out)
        case .object(let entries):
            var out: [String: Value] = [:]
            for e in entries {
                if let v = try evaluate(e.value, in: document) { out[e.key] = v }
            }
            return .object(out)
        case .unary(.not, let x):
            switch Truth(try evaluate(x, in: document)) {
            case .true: return .bool(false)
            case .false: return .bool(true)
            case let t: return t.value
            }
        case .unary(let op, let x):
            guard let v = try evaluate(x, in: document) else { return nil }
            return try Arithmetic.unary(op, v)
        case .binary(.and, let l, let r):
            let a = Truth(try evaluate(l, in: document))
            if case .false = a { return .bool(false) }
            return Self.and(a, Truth(try evaluate(r, in: document))).value
        case .binary(.or, let l, let r):
            let a = Truth(try evaluate(l, in: document))
            if case .true = a { return .bool(true) }
            return Self.or(a, Truth(try evaluate(r, in: document))).value
        case .binary(let op, let l, let r):
            let a = try evaluate(l, in: document), b = try evaluate(r, in: document)
            return try binary(op, a, b)
        case .between(let x, let lo, let hi, let negated):
            let v = try evaluate(x, in: document)
            let t = Self.and(Truth(Self.compare(.greaterEqual, v, try evaluate(lo, in: document))),
                             Truth(Self.compare(.lessEqual, v, try evaluate(hi, in: document))))
            return Self.negate(t, negated).value
        case .inList(let x, let items, let negated):
            guard let v = try evaluate(x, in: document) else { return nil }
            if case .null = v { return .null }
            for item in items {
                if let w = try evaluate(item, in: document), DQLOrder.equal(v, w) { return .bool(!negated) }
            }
            return .bool(negated)
        case .inArray(let x, let array, let negated):
            guard let v = try evaluate(x, in: document), let a = try evaluate(array, in: document) else { return nil }
            if case .null = v { return .null }
            guard case .array(let items) = a else { return .null }
            try context.charge(items.count)
            return .bool(items.contains { DQLOrder.equal(v, $0) } != negated)
        case .like(let x, let pattern, let escape, let insensitive, let negated):
            guard let v = try evaluate(x, in: document), let p = try evaluate(pattern, in: document) else { return nil }
            var esc: Value? = .string("\\")
            if let escape { esc = try evaluate(escape, in: document) }
            guard case .string(let s) = v, case .string(let ps) = p, case .string(let es)? = esc else { return .null }
            let compiled = try LikePattern(ps, escape: es)
            return .bool(try compiled.matches(s, caseInsensitive: insensitive, budget: context.budget) != negated)
        case .isNull(let x, let negated):
            let v = try evaluate(x, in: document)
            return .bool((v == .null) != negated)
        case .isMissing(let x, let negated):
            return .bool((try evaluate(x, in: document) == nil) != negated)
        case .call(let name, let args):
            var values: [Value?] = []
            values.reserveCapacity(args.count)
            for a in args { values.append(try evaluate(a, in: document)) }
            return try Functions.call(name, values, context: context)
        case .aggregate(let f, _, _):
            guard let aggregates else { throw .aggregateNotAllowed("this clause (\(f.rawValue))") }
            return aggregates[expression].flatMap { $0 }
        }
    }

    /// True when the condition is exactly true (how WHERE and HAVING filter).
    public func isTrue(_ condition: Expression, in document: Value?) throws(DQLEvaluationError) -> Bool {
        try evaluate(condition, in: document) == .bool(true)
    }

    @inline(__always) static func step(_ v: Value, _ c: PathComponent) -> Value? {
        switch (v, c) {
        case (.object(let o), .field(let f)): return o[f]
        case (.array(let a), .index(let i)): return i >= 0 && i < a.count ? a[i] : Value?.none  // not `nil`: Value is ExpressibleByNilLiteral
        default: return nil
        }
    }

    static func and(_ a: Truth, _ b: Truth) -> Truth {
        switch (a, b) {
        case (.false, _), (_, .false): .false
        case (.missing, _), (_, .missing): .missing
        case (.null, _), (_, .null): .null
        default: .true
        }
    }

    static func or(_ a: Truth, _ b: Truth) -> Truth {
        switch (a, b) {
        case (.true, _), (_, .true): .true
        case (.missing, _), (_, .missing): .missing
        case (.null, _), (_, .null): .null
        default: .false
        }
    }

    static func negate(_ t: Truth, _ negated: Bool) -> Truth {
        guard negated else { return t }
        switch t {
        case .true: return .false
        case .false: return .true
        default: return t
        }
    }

    func binary(_ op: BinaryOperator, _ a: Value?, _ b: Value?) throws(DQLEvaluationError) -> Value? {
        switch op {
        case .equal, .notEqual, .less, .lessEqual, .greater, .greaterEqual:
            return Self.compare(op, a, b)
        case .concat:
            guard let a, let b else { return nil }
            switch (a, b) {
            case (.string(let x), .string(let y)):
                guard x.utf8.count + y.utf8.count <= context.maxResultBytes else { throw .limitExceeded("string concatenation result larger than \(context.maxResultBytes) bytes") }
                return .string(x + y)
            case (.array(let x), .array(let y)):
                guard x.count + y.count <= context.maxResultBytes / 8 else { throw .limitExceeded("array concatenation result too large") }
                return .array(x + y)
            default: return .null
            }
        default:
            guard let a, let b else { return nil }
            return try Arithmetic.binary(op, a, b)
        }
    }

    /// The comparison operators under MISSING/NULL rules.
    static func compare(_ op: BinaryOperator, _ a: Value?, _ b: Value?) -> Value? {
        guard let a, let b else { return nil }
        if case .null = a { return .null }
        if case .null = b { return .null }
        let sameClass = DQLOrder.typeClass(a) == DQLOrder.typeClass(b)
        switch op {
        case .equal: return .bool(sameClass && DQLOrder.compare(a, b) == 0)
        case .notEqual: return .bool(!(sameClass && DQLOrder.compare(a, b) == 0))
        default:
            guard sameClass else { return .null }
            let c = DQLOrder.compare(a, b)
            switch op {
            case .less: return .bool(c < 0)
            case .lessEqual: return .bool(c <= 0)
            case .greater: return .bool(c > 0)
            default: return .bool(c >= 0)
            }
        }
    }
}
