// The DQL abstract syntax tree: plain Sendable value types, no positions (errors carry those),
// so two parses of equivalent text compare equal and parse -> print -> parse is the identity.

import Values

/// One step of a path: `.name`, `['name']` or `[3]`.
public enum PathComponent: Sendable, Hashable {
    case field(String)
    case index(Int)
}

/// A path rooted at a document field: `a.b[0].c`. Never empty.
public struct Path: Sendable, Hashable {
    public var root: String
    public var components: [PathComponent]

    public init(_ root: String, _ components: [PathComponent] = []) {
        self.root = root
        self.components = components
    }

    /// All steps including the root, for evaluation and SQL generation.
    public var steps: [PathComponent] { [.field(root)] + components }
}

public enum UnaryOperator: String, Sendable, Hashable {
    case not = "NOT", negate = "-", plus = "+"
}

public enum BinaryOperator: String, Sendable, Hashable, CaseIterable {
    case or = "OR", and = "AND"
    case equal = "=", notEqual = "!=", less = "<", lessEqual = "<=", greater = ">", greaterEqual = ">="
    case concat = "||"
    case add = "+", subtract = "-"
    case multiply = "*", divide = "/", modulo = "%"

    /// Binding strength: higher binds tighter. Comparisons are non-associative.
    var precedence: Int {
        switch self {
        case .or: 1
        case .and: 2
        case .equal, .notEqual, .less, .lessEqual, .greater, .greaterEqual: 4
        case .concat: 5
        case .add, .subtract: 6
        case .multiply, .divide, .modulo: 7
        }
    }
}

public enum AggregateFunction: String, Sendable, Hashable, CaseIterable {
    case count = "COUNT", sum = "SUM", avg = "AVG", min = "MIN", max = "MAX"
}

public struct ObjectEntry: Sendable, Hashable {
    public var key: String
    public var value: Expression
    public init(_ key: String, _ value: Expression) {
        self.key = key
        self.value = value
    }
}

public indirect enum Expression: Sendable, Hashable {
    /// null, booleans, numbers and strings.
    case literal(Value)
    case parameter(String)
    case path(Path)
    /// A step applied to something that is not a plain path: `:doc.a`, `f(x)[0]`, `(a || b).c`.
    case access(Expression, PathComponent)
    case array([Expression])
    case object([ObjectEntry])
    case unary(UnaryOperator, Expression)
    case binary(BinaryOperator, Expression, Expression)
    case between(Expression, low: Expression, high: Expression, negated: Bool)
    /// `x [NOT] IN (a, b, ...)`.
    case inList(Expression, [Expression], negated: Bool)
    /// `x [NOT] IN expr` where expr evaluates to an array (a parameter, a field, an array literal).
    case inArray(Expression, Expression, negated: Bool)
    case like(Expression, pattern: Expression, escape: Expression?, caseInsensitive: Bool, negated: Bool)
    case isNull(Expression, negated: Bool)
    case isMissing(Expression, negated: Bool)
    /// A scalar function call; the name is stored lowercased.
    case call(String, [Expression])
    /// An aggregate; a nil argument is `COUNT(*)`.
    case aggregate(AggregateFunction, Expression?, distinct: Bool)
}

public enum Projection: Sendable, Hashable {
    case all
    case expression(Expression, alias: String?)
}

public enum FieldType: String, Sendable, Hashable, CaseIterable {
    case register = "REGISTER", map = "MAP", counter = "COUNTER", pnCounter = "PN_COUNTER", attachment = "ATTACHMENT"
}

/// `field TYPE` inside `COLLECTION name (...)`.
public struct FieldDeclaration: Sendable, Hashable {
    public var path: Path
    public var type: FieldType
    public init(_ path: Path, _ type: FieldType) {
        self.path = path
        self.type = type
    }
}

/// A collection, optionally with a type declaration: `cars` or `COLLECTION cars (props MAP)`.
public struct CollectionReference: Sendable, Hashable {
    public var name: String
    /// nil when written without `COLLECTION (...)`; an explicit empty list is kept apart.
    public var declarations: [FieldDeclaration]?
    public init(_ name: String, declarations: [FieldDeclaration]? = nil) {
        self.name = name
        self.declarations = declarations
    }
}

public struct OrderingTerm: Sendable, Hashable {
    public var expression: Expression
    public var descending: Bool
    /// Whether ASC/DESC was written (kept so printing reproduces the statement).
    public var explicitDirection: Bool
    public init(_ expression: Expression, descending: Bool = false, explicitDirection: Bool = false) {
        self.expression = expression
        self.descending = descending
        self.explicitDirection = explicitDirection || descending
    }
}

public struct SelectStatement: Sendable, Hashable {
    public var distinct = false
    public var projections: [Projection]
    public var from: CollectionReference
    public var filter: Expression?
    public var groupBy: [Expression] = []
    public var having: Expression?
    public var orderBy: [OrderingTerm] = []
    public var limit: Expression?
    public var offset: Expression?

    public init(projections: [Projection], from: CollectionReference) {
        self.projections = projections
        self.from = from
    }
}

public enum ConflictPolicy: String, Sendable, Hashable, CaseIterable {
    case fail = "FAIL", doNothing = "DO NOTHING", doUpdate = "DO UPDATE", doUpdateLocalDiff = "DO UPDATE_LOCAL_DIFF"
}

public struct InsertStatement: Sendable, Hashable {
    public var collection: CollectionReference
    /// `INITIAL DOCUMENTS`: written at time zero so any real write wins.
    public var initial: Bool
    public var documents: [Expression]
    /// nil when no `ON ID CONFLICT` clause was written; execution treats that as `.fail`.
    public var onIdConflict: ConflictPolicy?

    public init(collection: CollectionReference, initial: Bool = false, documents: [Expression], onIdConflict: ConflictPolicy? = nil) {
        self.collection = collection
        self.initial = initial
        self.documents = documents
        self.onIdConflict = onIdConflict
    }

    public var conflictPolicy: ConflictPolicy { onIdConflict ?? .fail }
}

public enum CounterOperation: Sendable, Hashable {
    /// `INCREMENT BY n` (or the legacy `PN_INCREMENT BY n` when `legacy`).
    case increment(Expression, legacy: Bool)
    /// `RESTART` or `RESTART WITH n`.
    case restart(Expression?)
}

public struct CounterUpdate: Sendable, Hashable {
    public var path: Path
    public var operation: CounterOperation
    public init(_ path: Path, _ operation: CounterOperation) {
        self.path = path
        self.operation = operation
    }
}

public struct Assignment: Sendable, Hashable {
    public var path: Path
    public var value: Expression
    public init(_ path: Path, _ value: Expression) {
        self.path = path
        self.value = value
    }
}

public struct UpdateStatement: Sendable, Hashable {
    public var collection: CollectionReference
    public var apply: [CounterUpdate] = []
    public var set: [Assignment] = []
    public var unset: [Path] = []
    public var filter: Expression?
    public var orderBy: [OrderingTerm] = []
    public var limit: Expression?
    public var offset: Expression?

    public init(collection: CollectionReference) {
        self.collection = collection
    }
}

/// DELETE (writes tombstones that sync) and EVICT (drops the local copy only) share a shape.
public struct RemoveStatement: Sendable, Hashable {
    public var collection: CollectionReference
    public var filter: Expression?
    public init(collection: CollectionReference, filter: Expression?) {
        self.collection = collection
        self.filter = filter
    }
}

public enum SystemCommand: Sendable, Hashable {
    /// `ALTER SYSTEM SET name = value`.
    case set(String, Expression)
    /// `ALTER SYSTEM RESET name`, or `RESET ALL` when nil.
    case reset(String?)
    /// `SHOW name`, or `SHOW ALL` when nil.
    case show(String?)
}

public struct CreateIndexStatement: Sendable, Hashable {
    public var ifNotExists: Bool
    public var name: String
    public var collection: String
    public var paths: [Path]
    public init(ifNotExists: Bool = false, name: String, collection: String, paths: [Path]) {
        self.ifNotExists = ifNotExists
        self.name = name
        self.collection = collection
        self.paths = paths
    }
}

public struct DropIndexStatement: Sendable, Hashable {
    public var ifExists: Bool
    public var name: String
    public var collection: String?
    public init(ifExists: Bool = false, name: String, collection: String? = nil) {
        self.ifExists = ifExists
        self.name = name
        self.collection = collection
    }
}

public indirect enum Statement: Sendable, Hashable {
    case select(SelectStatement)
    case insert(InsertStatement)
    case update(UpdateStatement)
    case delete(RemoveStatement)
    case evict(RemoveStatement)
    case system(SystemCommand)
    case createIndex(CreateIndexStatement)
    case dropIndex(DropIndexStatement)
    case explain(Statement)

    /// The `queryType` reported by the REST API.
    public var queryType: String {
        switch self {
        case .select: "select"
        case .insert: "insert"
        case .update: "update"
        case .delete: "delete"
        case .evict: "evict"
        case .system(.set), .system(.reset): "alter"
        case .system(.show): "show"
        case .createIndex: "create_index"
        case .dropIndex: "drop_index"
        case .explain: "explain"
        }
    }
}
