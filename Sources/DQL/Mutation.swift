// Mutations as typed plans: this file binds arguments, evaluates documents and values, validates
// paths against strict mode and the COLLECTION type declarations, and gives an UPDATE's field
// operations per document. DocumentMutations.swift applies a plan to a document as CRDT operations
// (REGISTER set, MAP put/remove, COUNTER increment/restart), with the conflict policies and the
// mutatedDocumentIds they imply, for both executors (server store and small peer).
//
// Strict mode (DQL_STRICT_MODE, default on): an object value is one REGISTER unless the path is
// declared MAP, so `SET a.b = 1` needs `COLLECTION c (a MAP)`; with strict mode off objects are
// MAPs and dot paths work everywhere. Array elements are never assigned on their own: an array is
// a REGISTER, replaced as a whole.

import Values

/// One change to one field of one document. Paths include the root field.
public enum FieldOperation: Sendable, Hashable {
    case set([PathComponent], Value)
    case unset([PathComponent])
    /// Add `amount` (a number) to a counter; `legacy` for PN_INCREMENT (a PN_COUNTER).
    case increment([PathComponent], amount: Value, legacy: Bool)
    /// Set a counter to `value` (0 when nil) with last-write-wins.
    case restart([PathComponent], value: Value?)
}

/// Field types from `COLLECTION name (field TYPE, ...)`, looked up by path.
public struct TypeDeclarations: Sendable, Hashable {
    public let types: [[PathComponent]: FieldType]

    public init(_ declarations: [FieldDeclaration]?) {
        var t: [[PathComponent]: FieldType] = [:]
        for d in declarations ?? [] { t[d.path.steps] = d.type }
        types = t
    }

    public func type(of steps: [PathComponent]) -> FieldType? { types[steps] }

    /// Whether every proper prefix of `steps` may hold a MAP (declared MAP, or strict mode off).
    func parentsAreMaps(_ steps: [PathComponent], strictMode: Bool) -> Bool {
        guard steps.count > 1 else { return true }
        return (1..<steps.count).allSatisfy { n in
            let prefix = Array(steps.prefix(n))
            return type(of: prefix) == .map || (!strictMode && type(of: prefix) == nil)
        }
    }
}

/// Documents are rejected above this serialized size and produce a warning above `documentWarningBytes`.
public let documentLimitBytes = 5 * 1024 * 1024
public let documentWarningBytes = 256 * 1024

public struct InsertPlan: Sendable {
    public let collection: String
    public let declarations: TypeDeclarations
    public let initial: Bool
    public let policy: ConflictPolicy
    public let strictMode: Bool
    /// The evaluated documents, in statement order. `_id` is a string or an object when present;
    /// when absent the store generates one.
    public let documents: [[String: Value]]
    public let warnings: [String]

    public init(_ s: InsertStatement, context: EvaluationContext) throws(DQLEvaluationError) {
        let evaluated = try Self.evaluate(s, documents: s.documents.indices, context: context)
        self.init(unevaluated: s, context: context, documents: evaluated.documents, warnings: evaluated.warnings)
    }

    /// The statement's collection, types and conflict policy without its documents, which the
    /// caller evaluates itself, a range at a time (`evaluate(_:documents:context:)`): a bulk INSERT
    /// then evaluates each chunk on the thread that merges it, while PostgreSQL stores the previous
    /// one, instead of all of them before its first write.
    public init(unevaluated s: InsertStatement, context: EvaluationContext, documents: [[String: Value]] = [], warnings: [String] = []) {
        collection = s.collection.name
        declarations = TypeDeclarations(s.collection.declarations)
        initial = s.initial
        policy = s.conflictPolicy
        strictMode = context.strictMode
        self.documents = documents
        self.warnings = warnings
    }

    /// Evaluates the statement's documents at `range` (positions in the statement, which its
    /// errors and warnings name from 1): each must be an object whose `_id`, when present, is a
    /// string or an object, and within the size limit.
    public static func evaluate(_ s: InsertStatement, documents range: Range<Int>, context: EvaluationContext) throws(DQLEvaluationError) -> (documents: [[String: Value]], warnings: [String]) {
        let evaluator = Evaluator(context: context)
        var docs: [[String: Value]] = []
        docs.reserveCapacity(range.count)
        var warnings: [String] = []
        for n in range {
            guard case .object(let o)? = try evaluator.evaluate(s.documents[n], in: nil) else { throw .notAnObject("INSERT document \(n + 1)") }
            if let id = o["_id"] {
                switch id {
                case .string, .object: break
                default: throw .invalidStatement("INSERT document \(n + 1): _id must be a string or an object, not \(id.typeName)")
                }
            }
            let size = JSON.serializedCount(.object(o))
            if size > documentLimitBytes { throw .limitExceeded("INSERT document \(n + 1) is \(size) bytes; the limit is \(documentLimitBytes)") }
            if size > documentWarningBytes { warnings.append("document \(n + 1) is \(size) bytes; documents above \(documentWarningBytes) bytes sync slowly") }
            docs.append(o)
        }
        return (docs, warnings)
    }
}

public struct UpdatePlan: Sendable {
    public let statement: UpdateStatement
    public let declarations: TypeDeclarations
    public private(set) var evaluator: Evaluator

    /// The same plan evaluating under `budget` (steps and deadline for in-memory work).
    public func budgeted(_ budget: EvaluationBudget?) -> UpdatePlan {
        var copy = self
        copy.evaluator = evaluator.budgeted(budget)
        return copy
    }

    public init(_ u: UpdateStatement, context: EvaluationContext) throws(DQLEvaluationError) {
        statement = u
        declarations = TypeDeclarations(u.collection.declarations)
        evaluator = Evaluator(context: context)
        var touched = Set<[PathComponent]>()
        let paths = u.apply.map(\.path) + u.set.map(\.path) + u.unset
        for p in paths {
            let steps = p.steps
            let text = Printer.path(p)
            if p.root == "_id" { throw .invalidStatement("_id cannot be changed (\(text))") }
            if steps.contains(where: { if case .index = $0 { true } else { false } }) {
                throw .invalidStatement("\(text): array elements cannot be assigned on their own; assign the whole array")
            }
            guard touched.insert(steps).inserted else { throw .invalidStatement("\(text) is changed twice in one UPDATE") }
            guard declarations.parentsAreMaps(steps, strictMode: context.strictMode) else {
                throw .invalidStatement("\(text): in strict mode a nested path needs its parent declared MAP, "
                    + "e.g. UPDATE COLLECTION \(Printer.name(u.collection.name)) (\(Printer.name(p.root)) MAP), or DQL_STRICT_MODE off")
            }
        }
        // A path and one of its ancestors in the same UPDATE would race (which wins?): refuse it.
        for p in touched {
            for q in touched where q.count < p.count && Array(p.prefix(q.count)) == q {
                throw .invalidStatement("\(Printer.path(Path.from(p))) and its parent \(Printer.path(Path.from(q))) are both changed")
            }
        }
        for c in u.apply {
            if let t = declarations.type(of: c.path.steps), t != .counter, t != .pnCounter {
                throw .invalidStatement("\(Printer.path(c.path)) is declared \(t.rawValue); APPLY needs a COUNTER")
            }
        }
    }

    /// The field operations for one matched document (SET values may refer to the document).
    public func operations(for document: Value) throws(DQLEvaluationError) -> [FieldOperation] {
        var ops: [FieldOperation] = []
        for c in statement.apply {
            switch c.operation {
            case .increment(let e, let legacy):
                guard let v = try evaluator.evaluate(e, in: document), v.doubleValue != nil else {
                    throw .invalidStatement("INCREMENT BY needs a number for \(Printer.path(c.path))")
                }
                ops.append(.increment(c.path.steps, amount: v, legacy: legacy))
            case .restart(let e):
                var value: Value?
                if let e {
                    guard let v = try evaluator.evaluate(e, in: document), v.doubleValue != nil else {
                        throw .invalidStatement("RESTART WITH needs a number for \(Printer.path(c.path))")
                    }
                    value = v
                }
                ops.append(.restart(c.path.steps, value: value))
            }
        }
        for a in statement.set {
            // Setting MISSING removes the field, as UNSET would.
            if let v = try evaluator.evaluate(a.value, in: document) {
                ops.append(.set(a.path.steps, v))
            } else {
                ops.append(.unset(a.path.steps))
            }
        }
        for p in statement.unset { ops.append(.unset(p.steps)) }
        return ops
    }
}

extension Path {
    static func from(_ steps: [PathComponent]) -> Path {
        guard case .field(let root)? = steps.first else { return Path("") }
        return Path(root, Array(steps.dropFirst()))
    }
}

/// Server settings changed with ALTER SYSTEM and read with SHOW.
public enum SystemSetting: String, Sendable, CaseIterable {
    case strictMode = "DQL_STRICT_MODE"
    /// Days a deleted document's tombstone is kept before maintenance reaps it (docs/STORAGE.md,
    /// "Maintenance").
    case tombstoneTTLDays = "TOMBSTONE_TTL_DAYS"
    /// Days the change log keeps a transaction before maintenance prunes it; a peer away longer
    /// resumes with a full initial sync.
    case changeLogRetentionDays = "CHANGE_LOG_RETENTION_DAYS"

    public var defaultValue: Value {
        switch self {
        case .strictMode: .bool(true)
        case .tombstoneTTLDays, .changeLogRetentionDays: .int(30)
        }
    }

    /// The range a day count may take: at least one day (a shorter retention would prune what a
    /// lagging instance's change feed has not read yet), at most about a century.
    public static let days: ClosedRange<Int64> = 1...36_500

    /// Validates `ALTER SYSTEM SET name = value` (names are case-insensitive).
    public static func validate(name: String, value: Value) throws(DQLEvaluationError) -> (SystemSetting, Value) {
        guard let setting = SystemSetting(rawValue: name.uppercased()) else {
            throw .invalidStatement("unknown setting \(name); known: \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        switch (setting, value) {
        case (.strictMode, .bool): return (setting, value)
        case (.strictMode, .string(let s)) where ["true", "false"].contains(s.lowercased()): return (setting, .bool(s.lowercased() == "true"))
        case (.strictMode, _): throw .invalidStatement("\(setting.rawValue) must be true or false")
        case (.tombstoneTTLDays, .int(let n)), (.changeLogRetentionDays, .int(let n)):
            guard days.contains(n) else { throw .invalidStatement("\(setting.rawValue) must be a whole number of days from \(days.lowerBound) to \(days.upperBound)") }
            return (setting, value)
        case (.tombstoneTTLDays, _), (.changeLogRetentionDays, _):
            throw .invalidStatement("\(setting.rawValue) must be a whole number of days from \(days.lowerBound) to \(days.upperBound)")
        }
    }
}
