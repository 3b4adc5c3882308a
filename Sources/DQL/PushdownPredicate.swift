// Translation of DQL conditions into PostgreSQL predicates over the JSONB document column.
//
// DQL logic has four truth values (true, false, NULL, MISSING) and SQL three, and the two disagree
// on types (DQL `age < 5` is NULL when `age` is a string; jsonb `<` would order the string below the
// number). So instead of translating a condition C directly, every pushable C is compiled into two
// SQL predicates that are each *exactly* right:
//
//     whenTrue(C)   holds  <=>  C evaluates to true
//     whenFalse(C)  holds  <=>  C evaluates to false
//
// and the connectives combine them (De Morgan does the rest, and unknown is "neither"):
//
//     whenTrue(A AND B) = whenTrue(A) AND whenTrue(B)     whenFalse(A AND B) = whenFalse(A) OR whenFalse(B)
//     whenTrue(A OR B)  = whenTrue(A) OR whenTrue(B)      whenFalse(A OR B)  = whenFalse(A) AND whenFalse(B)
//     whenTrue(NOT A)   = whenFalse(A)                    whenFalse(NOT A)   = whenTrue(A)
//
// Only AND and OR ever combine the generated predicates, so an SQL NULL inside them acts as "does
// not hold", which is what we want. WHERE keeps whenTrue(condition).
//
// A path `a.b[0]` becomes `(value -> 'a' -> 'b' -> 0)`: `->` with a text key only looks into objects
// and with an integer only into arrays, and yields SQL NULL where DQL yields MISSING. Keys are
// written as SQL string literals (they are names from the statement, not values; quotes are doubled
// and the connection must keep `standard_conforming_strings` on, the default since PostgreSQL 9.1),
// so that an expression index from CREATE INDEX matches the query text. Every value is a bind.

import Quoting
import Values

/// A value bound to a `$n` placeholder. `text` is what goes on the wire (libpq text format).
public enum SQLParameter: Sendable, Hashable, CustomStringConvertible {
    case text(String)
    /// JSON text, cast with `::jsonb` in the SQL.
    case jsonb(String)
    case bigint(Int64)

    public var text: String {
        switch self {
        case .text(let s), .jsonb(let s): s
        case .bigint(let i): String(i)
        }
    }

    public var description: String {
        switch self {
        case .text(let s): "'\(s)' (text)"
        case .jsonb(let s): "'\(s)' (jsonb)"
        case .bigint(let i): "\(i) (bigint)"
        }
    }
}

/// Accumulates SQL text and its parameters.
struct SQLBuilder {
    var parameters: [SQLParameter] = []

    mutating func bind(_ p: SQLParameter) -> String {
        parameters.append(p)
        switch p {
        case .jsonb: return "$\(parameters.count)::jsonb"
        case .text: return "$\(parameters.count)::text"
        case .bigint: return "$\(parameters.count)::bigint"
        }
    }

    static func quoteLiteral(_ s: String) -> String { Quote.sqlLiteral(s) }

    static func quoteIdentifier(_ s: String) -> String { Quote.sqlIdentifier(s) }
}

/// The two exact SQL predicates of one DQL condition.
struct TwoSided {
    var whenTrue: String
    var whenFalse: String
    static let never = TwoSided(whenTrue: "FALSE", whenFalse: "FALSE")
    var negated: TwoSided { TwoSided(whenTrue: whenFalse, whenFalse: whenTrue) }
}

struct PredicateCompiler {
    let valueColumn: String
    /// The quoted id column when it equals `value -> '_id'` on every row (`PushdownTable.idColumnMirrorsValueID`).
    var idColumn: String? = nil
    let evaluator: Evaluator
    var sql = SQLBuilder()

    /// `(value -> 'a' -> 0)`; `_id…` starts at the id column when it mirrors `value -> '_id'`.
    func jsonPath(_ p: Path) -> String {
        var steps = p.steps[...]
        var s = "(" + valueColumn
        if let idColumn, case .field("_id")? = steps.first {
            s = "(" + idColumn
            steps = steps.dropFirst()
        }
        for step in steps {
            switch step {
            case .field(let f): s += " -> " + SQLBuilder.quoteLiteral(f)
            case .index(let i): s += " -> " + String(i)
            }
        }
        return s + ")"
    }

    /// A constant: no document reference and no aggregate, folded now. nil when it is not constant
    /// (or folding it fails, in which case memory evaluation reports the error as it would anyway).
    func constant(_ e: Expression) -> Value?? {
        if e.contains(where: { if case .path = $0 { true } else if case .aggregate = $0 { true } else { false } }) { return nil }
        // Literals and parameters cost nothing, even once the folding budget is spent.
        if case .literal(let v) = e { return .some(v) }
        if case .parameter(let name) = e, let v = evaluator.context.arguments[name] { return .some(v) }
        do {
            return .some(try evaluator.evaluate(e, in: nil))  // .some(nil) is a constant MISSING
        } catch {
            return nil
        }
    }

    /// Compiles a condition, or returns nil when some part of it cannot be pushed.
    mutating func compile(_ e: Expression) -> TwoSided? {
        switch e {
        case .binary(.and, let l, let r):
            guard let a = compile(l), let b = compile(r) else { return nil }
            return TwoSided(whenTrue: "(\(a.whenTrue) AND \(b.whenTrue))", whenFalse: "(\(a.whenFalse) OR \(b.whenFalse))")
        case .binary(.or, let l, let r):
            guard let a = compile(l), let b = compile(r) else { return nil }
            return TwoSided(whenTrue: "(\(a.whenTrue) OR \(b.whenTrue))", whenFalse: "(\(a.whenFalse) AND \(b.whenFalse))")
        case .unary(.not, let x):
            return compile(x)?.negated
        case .path(let p):
            let j = jsonPath(p)
            return TwoSided(whenTrue: "(\(j) = 'true'::jsonb)", whenFalse: "(\(j) = 'false'::jsonb)")
        case .binary(let op, let l, let r) where op.precedence == 4:
            if case .path(let p) = l, let c = constant(r) { return comparison(op, p, c) }
            if case .path(let p) = r, let c = constant(l) { return comparison(op.flipped, p, c) }
            return oneTimeFilter(e)
        case .between(.path(let p), let lo, let hi, let negated):
            guard let a = constant(lo), let b = constant(hi),
                  let low = comparison(.greaterEqual, p, a), let high = comparison(.lessEqual, p, b) else { return nil }
            let t = TwoSided(whenTrue: "(\(low.whenTrue) AND \(high.whenTrue))", whenFalse: "(\(low.whenFalse) OR \(high.whenFalse))")
            return negated ? t.negated : t
        case .inList(.path(let p), let items, let negated):
            var values: [Value] = []
            for item in items {
                guard let c = constant(item) else { return nil }
                if let v = c { values.append(v) }
            }
            let t = membership(p, values)
            return negated ? t.negated : t
        case .inArray(.path(let p), let array, let negated):
            guard let c = constant(array) else { return nil }
            guard case .array(let values)? = c else { return .never }  // MISSING, NULL or not an array: unknown
            let t = membership(p, values)
            return negated ? t.negated : t
        case .inArray(let element, .path(let p), let negated):
            guard let c = constant(element) else { return nil }
            guard let v = c, v != .null else { return .never }
            switch v {
            case .array, .object: return nil  // jsonb containment is recursive for containers
            default: break
            }
            let j = jsonPath(p)
            let param = sql.bind(.jsonb(JSON.string(.array([v]))))
            let t = TwoSided(whenTrue: "(jsonb_typeof(\(j)) = 'array' AND \(j) @> \(param))",
                             whenFalse: "(jsonb_typeof(\(j)) = 'array' AND NOT (\(j) @> \(param)))")
            return negated ? t.negated : t
        case .like(.path(let p), let pattern, let escape, false, let negated):
            guard let pc = constant(pattern) else { return nil }
            var esc: Value? = .string("\\")
            if let escape {
                guard let ec = constant(escape) else { return nil }
                esc = ec
            }
            guard case .string(let ps)? = pc, case .string(let es)? = esc else { return .never }
            // Patterns that are errors in memory stay in memory; % or _ as escape are left alone too.
            guard (try? LikePattern(ps, escape: es)) != nil, es != "%", es != "_" else { return nil }
            let j = jsonPath(p)
            let text = "((\(j) #>> '{}') COLLATE \"C\" LIKE \(sql.bind(.text(ps))) ESCAPE \(sql.bind(.text(es))))"
            let t = TwoSided(whenTrue: "(jsonb_typeof(\(j)) = 'string' AND \(text))",
                             whenFalse: "(jsonb_typeof(\(j)) = 'string' AND NOT \(text))")
            return negated ? t.negated : t
        case .isNull(.path(let p), let negated):
            let j = jsonPath(p)
            let t = TwoSided(whenTrue: "(\(j) = 'null'::jsonb)", whenFalse: "(\(j) IS DISTINCT FROM 'null'::jsonb)")
            return negated ? t.negated : t
        case .isMissing(.path(let p), let negated):
            let j = jsonPath(p)
            let t = TwoSided(whenTrue: "(\(j) IS NULL)", whenFalse: "(\(j) IS NOT NULL)")
            return negated ? t.negated : t
        case .literal(.bool(let b)):
            return TwoSided(whenTrue: b ? "TRUE" : "FALSE", whenFalse: b ? "FALSE" : "TRUE")
        case .literal:
            return .never
        default:
            return oneTimeFilter(e)
        }
    }

    /// A condition with no document in it (`regexp_like(:s, :p)`, `:n > 3`) is evaluated once,
    /// here, and pushed as TRUE or FALSE, like PostgreSQL's one-time filter: not once per document
    /// in memory, and a false one reads no row at all. nil when it refers to a document or does not
    /// fold within the planner's budget (then memory evaluates it, errors included, as before).
    private func oneTimeFilter(_ e: Expression) -> TwoSided? {
        guard let c = constant(e) else { return nil }
        guard case .bool(let b)? = c else { return .never }  // NULL, MISSING or not a boolean: never true
        return TwoSided(whenTrue: b ? "TRUE" : "FALSE", whenFalse: b ? "FALSE" : "TRUE")
    }

    /// `path op constant` with DQL comparison semantics.
    mutating func comparison(_ op: BinaryOperator, _ p: Path, _ c: Value?) -> TwoSided? {
        guard let c, c != .null else { return .never }  // comparing with MISSING or NULL is unknown
        let j = jsonPath(p)
        switch op {
        case .equal, .notEqual:
            let param = sql.bind(.jsonb(JSON.string(c)))
            let eq = TwoSided(whenTrue: "(\(j) = \(param))", whenFalse: "(\(j) <> \(param) AND \(j) <> 'null'::jsonb)")
            return op == .equal ? eq : eq.negated
        default:
            let type: String
            let lhs: String
            let rhs: String
            switch c {
            case .int, .double:
                type = "number"; lhs = j; rhs = sql.bind(.jsonb(JSON.string(c)))
            case .bool:
                type = "boolean"; lhs = j; rhs = sql.bind(.jsonb(JSON.string(c)))
            case .string(let s):
                type = "string"; lhs = "(\(j) #>> '{}') COLLATE \"C\""; rhs = sql.bind(.text(s))
            default:
                return nil  // arrays and objects: jsonb orders them differently from DQL
            }
            let guardType = "jsonb_typeof(\(j)) = '\(type)'"
            return TwoSided(whenTrue: "(\(guardType) AND \(lhs) \(op.rawValue) \(rhs))",
                            whenFalse: "(\(guardType) AND \(lhs) \(op.complement.rawValue) \(rhs))")
        }
    }

    /// `path IN (values)`: true when equal to one, false when not (and the path is neither MISSING nor NULL).
    mutating func membership(_ p: Path, _ values: [Value]) -> TwoSided {
        let j = jsonPath(p)
        let candidates = values.filter { $0 != .null }
        guard !candidates.isEmpty else {
            return TwoSided(whenTrue: "FALSE", whenFalse: "(\(j) <> 'null'::jsonb)")
        }
        let list = candidates.map { sql.bind(.jsonb(JSON.string($0))) }.joined(separator: ", ")
        return TwoSided(whenTrue: "(\(j) IN (\(list)))", whenFalse: "(\(j) <> 'null'::jsonb AND \(j) NOT IN (\(list)))")
    }
}

extension BinaryOperator {
    /// The operator with its operands swapped: `c < p` is `p > c`.
    var flipped: BinaryOperator {
        switch self {
        case .less: .greater
        case .lessEqual: .greaterEqual
        case .greater: .less
        case .greaterEqual: .lessEqual
        default: self
        }
    }

    /// The ordering operator that holds exactly when this one fails (same type class, no unknowns).
    var complement: BinaryOperator {
        switch self {
        case .less: .greaterEqual
        case .lessEqual: .greater
        case .greater: .lessEqual
        case .greaterEqual: .less
        case .equal: .notEqual
        case .notEqual: .equal
        default: self
        }
    }
}
