// DQL on the local store, with the server's semantics: SELECT through DQL's `SelectQuery` over the
// collection's documents; INSERT / UPDATE / DELETE / EVICT through the shared pure mutation code in
// DQL (DocumentMutations.swift), stamped with this peer's site id and clock. A write is planned on
// copies first (nothing changes on error), then made durable, then installed (SmallPeer.swift).

import CRDT
import DQL
import SyncProtocol
import Values

/// The outcome of one statement, shaped like the server's `ExecuteResult` (without transaction ids:
/// a peer has none of its own).
public struct QueryResult: Sendable, Equatable {
    /// `select`, `insert`, `update`, `delete`, `evict`, `show`.
    public var queryType: String
    public var items: [Value]
    /// `_id`s of the documents the statement changed, in statement order.
    public var mutatedDocumentIDs: [Value]
    public var warnings: [String]

    public init(queryType: String, items: [Value] = [], mutatedDocumentIDs: [Value] = [], warnings: [String] = []) {
        self.queryType = queryType
        self.items = items
        self.mutatedDocumentIDs = mutatedDocumentIDs
        self.warnings = warnings
    }
}

/// Everything the small peer's API can throw.
public enum SmallPeerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The statement does not parse (line and column in the message).
    case syntax(DQLSyntaxError)
    /// The statement parses but cannot run (arguments, types, paths).
    case invalid(String)
    /// INSERT with ON ID CONFLICT FAIL found the document.
    case conflict(String)
    /// A document would exceed the size limit.
    case tooLarge(String)
    /// A statement a small peer does not run (ALTER SYSTEM, CREATE/DROP INDEX, EXPLAIN).
    case unsupported(String)
    /// The peer's directory could not be read or written; the statement did not take effect.
    case storage(PeerStorageError)
    /// The peer was closed.
    case closed

    public var description: String {
        switch self {
        case .syntax(let e): "syntax error at \(e.location.line):\(e.location.column): expected \(e.expected), found \(e.found)"
        case .invalid(let m), .conflict(let m), .tooLarge(let m): m
        case .unsupported(let m): m
        case .storage(let e): "local storage failed: \(e)"
        case .closed: "the peer is closed"
        }
    }

    static func from(_ e: DocumentMutationError) -> SmallPeerError {
        switch e {
        case .conflict: .conflict(e.description)
        case .tooLarge(let m): .tooLarge(m)
        case .invalid(.limitExceeded(let m)): .tooLarge(m)
        case .invalid, .crdt: .invalid(e.description)
        }
    }

    static func from(_ e: DQLEvaluationError) -> SmallPeerError {
        if case .limitExceeded(let m) = e { return .tooLarge(m) }
        return .invalid(e.description)
    }
}

/// A planned write: the result to return, the commit to persist, and the documents to install.
struct PlannedWrite {
    var result: QueryResult
    var commit: Commit
    var documents: [(ref: DocumentRef, document: Document?)]
    var replica: Replica
}

extension LocalStore {
    /// Runs a SELECT (or SHOW) over the documents held.
    func select(_ s: SelectStatement, context: EvaluationContext) throws(SmallPeerError) -> QueryResult {
        let query: SelectQuery
        do { query = try SelectQuery(s, context: context) } catch { throw .from(error) }
        do { return QueryResult(queryType: "select", items: try query.run(candidates(s.from.name, s.filter, context))) } catch { throw .from(error) }
    }

    /// Plans a write statement; the store is not changed.
    func plan(_ statement: Statement, context: EvaluationContext, generateID: () -> Value) throws(SmallPeerError) -> PlannedWrite {
        var replica = self.replica
        var planned = PlannedWrite(result: QueryResult(queryType: statement.queryType), commit: Commit(clock: 0), documents: [], replica: replica)
        switch statement {
        case .insert(let i):
            let plan: InsertPlan
            do { plan = try InsertPlan(i, context: context) } catch { throw .from(error) }
            planned.result.warnings = plan.warnings
            let types = plan.crdtTypes
            let groups = InsertGroups(plan.documents, generateID: generateID)
            if let conflict = plan.conflictWithExisting(groups.supplied, isLive: {
                document(DocumentRef(collection: plan.collection, id: $0))?.exists == true
            }) { throw .from(conflict) }
            for id in groups.order {
                let ref = DocumentRef(collection: plan.collection, id: id)
                let original: Document
                if let existing = document(ref) { original = existing } else {
                    do { original = try Document(id: id) } catch { throw .invalid(error.description) }
                }
                var doc = original
                let changed: Bool
                do { changed = try plan.apply(groups.fieldsByID[id] ?? [], to: &doc, types: types, replica: &replica) } catch { throw .from(error) }
                record(ref, before: original, after: doc, mutated: changed, into: &planned)
            }
        case .update(let u):
            let plan: UpdatePlan
            do { plan = try UpdatePlan(u, context: context) } catch { throw .from(error) }
            for (ref, current) in try selection(u.collection, u.filter, u.orderBy, u.limit, u.offset, context) {
                guard let original = document(ref) else { continue }
                var doc = original
                let outcome: (changed: Bool, warning: String?)
                do { outcome = try plan.apply(to: &doc, current: current, replica: &replica) } catch { throw .from(error) }
                if let w = outcome.warning { planned.result.warnings.append(w) }
                record(ref, before: original, after: doc, mutated: outcome.changed, into: &planned)
            }
        case .delete(let r):
            for (ref, _) in try selection(r.collection, r.filter, [], nil, nil, context) {
                guard let original = document(ref) else { continue }
                var doc = original
                _ = doc.delete(replica: &replica)
                record(ref, before: original, after: doc, mutated: true, into: &planned)
            }
        case .evict(let r):
            for (ref, _) in try selection(r.collection, r.filter, [], nil, nil, context) {
                planned.documents.append((ref, nil))
                planned.commit.documents.append((ref, .evict))
                // Local changes not yet uploaded go with the copy: EVICT means "forget it here".
                forgetUploads(ref, into: &planned.commit)
                planned.result.mutatedDocumentIDs.append(ref.id)
            }
        case .select, .explain, .system, .createIndex, .dropIndex:
            throw .unsupported("\(statement.queryType) is not a write")
        }
        planned.replica = replica
        planned.commit.clock = replica.clock.last.rawValue
        return planned
    }

    /// Adds one document's change to the plan: its delta, and its upload entries (the base is the
    /// version before the first change a server has not acknowledged).
    private func record(_ ref: DocumentRef, before: Document, after: Document, mutated: Bool, into planned: inout PlannedWrite) {
        let delta = after.delta(since: before.versionVector)
        guard !delta.isEmpty else { return }
        planned.documents.append((ref, after))
        planned.commit.documents.append((ref, .merge(delta)))
        markChanged(ref, before: before.versionVector, origin: nil, into: &planned.commit)
        if mutated { planned.result.mutatedDocumentIDs.append(ref.id) }
    }

    /// The live documents a filter selects, in the statement's order (ORDER BY, LIMIT, OFFSET).
    private func selection(_ collection: CollectionReference, _ filter: Expression?, _ orderBy: [OrderingTerm],
                           _ limit: Expression?, _ offset: Expression?,
                           _ context: EvaluationContext) throws(SmallPeerError) -> [(DocumentRef, Value)] {
        var s = SelectStatement(projections: [.all], from: collection)
        s.filter = filter
        s.orderBy = orderBy
        s.limit = limit
        s.offset = offset
        let rows: [Value]
        do { rows = try SelectQuery(s, context: context).run(candidates(collection.name, filter, context)) } catch { throw .from(error) }
        return rows.compactMap { row in row["_id"].map { (DocumentRef(collection: collection.name, id: $0), row) } }
    }

    /// The documents a filter can match: the one named by `_id = 'text'` (a top-level conjunct,
    /// literal or parameter) by lookup, else the whole collection. The query still applies the
    /// whole filter, so this only skips documents that cannot match.
    func candidates(_ collection: String, _ filter: Expression?, _ context: EvaluationContext) -> [Value] {
        guard let filter, let id = Self.idEquality(filter, context) else { return values(of: collection) }
        return value(DocumentRef(collection: collection, id: id)).map { [$0] } ?? []
    }

    static func idEquality(_ e: Expression, _ context: EvaluationContext) -> Value? {
        switch e {
        case .binary(.and, let l, let r):
            return idEquality(l, context) ?? idEquality(r, context)
        case .binary(.equal, .path(let p), let v), .binary(.equal, let v, .path(let p)):
            guard p.root == "_id", p.components.isEmpty else { return nil }
            let bound: Value?
            switch v {
            case .literal(let x): bound = x
            case .parameter(let name): bound = context.arguments[name]
            default: bound = nil
            }
            // Strings only: an object id may equal another spelling under DQL's `=` (1 vs 1.0).
            if case .string? = bound { return bound }
            return nil
        default:
            return nil
        }
    }
}
