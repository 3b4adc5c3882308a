// Errors of the DQL layer: syntax errors carry a position, the offending token and what was
// expected; evaluation errors name the problem in words a client can act on.

/// A statement that does not parse. `description` reads like
/// `line 1, column 22: expected FROM, found 'WHERE'`.
public struct DQLSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    public var location: SourceLocation
    /// The token at which parsing stopped, as quoted in messages (e.g. `'WHERE'`, `end of input`).
    public var found: String
    /// What the grammar allowed at that point (e.g. `FROM`, `an expression`).
    public var expected: String

    public init(location: SourceLocation, found: String, expected: String) {
        self.location = location
        self.found = found
        self.expected = expected
    }

    public var description: String { "\(location): expected \(expected), found \(found)" }
}

/// A statement that parsed but cannot be executed as written, or an expression that failed.
public enum DQLEvaluationError: Error, Sendable, Hashable, CustomStringConvertible {
    case missingArgument(String)
    case unknownFunction(String, arity: Int)
    case wrongArgumentCount(function: String, expected: String, got: Int)
    case numericOverflow(String)
    case invalidArgument(function: String, reason: String)
    case invalidLikePattern(String)
    case aggregateNotAllowed(String)
    case notAnObject(String)
    case invalidStatement(String)
    case limitExceeded(String)
    /// A per-call step budget ran out (`EvaluationBudget`, exhaustion `.fail`).
    case budgetExceeded(steps: Int)
    /// The statement's deadline passed during in-memory evaluation (the statement timeout).
    case deadlineExceeded
    /// A slice budget ran out: the caller runs the evaluation again elsewhere (never shown to clients).
    case sliceExhausted

    public var description: String {
        switch self {
        case .missingArgument(let n): "no value was given for parameter :\(n)"
        case .unknownFunction(let n, let a): "unknown function \(n) with \(a) argument\(a == 1 ? "" : "s")"
        case .wrongArgumentCount(let f, let e, let g): "\(f) takes \(e) argument\(e == "1" ? "" : "s"), got \(g)"
        case .numericOverflow(let what): "numeric overflow in \(what) (the result does not fit a 64-bit integer or a finite double)"
        case .invalidArgument(let f, let r): "invalid argument to \(f): \(r)"
        case .invalidLikePattern(let p): "invalid LIKE pattern '\(p)': it ends with the escape character"
        case .aggregateNotAllowed(let w): "aggregate functions are not allowed in \(w)"
        case .notAnObject(let w): "\(w) must be an object"
        case .invalidStatement(let w): w
        case .limitExceeded(let w): w
        case .budgetExceeded(let n): "the expression is too expensive to evaluate (more than \(n) steps)"
        case .deadlineExceeded: "the statement timed out during in-memory evaluation (filtering, sorting or grouping took longer than the statement timeout)"
        case .sliceExhausted: "evaluation paused to continue off the event loop"
        }
    }
}
