// The rules of INSERT and UPDATE, once, for every executor: a validated plan (Mutation.swift) plus a
// document's current CRDT state in, the updated state and "was it mutated" out, and the errors (with
// their messages) a statement meets on the way. No storage, no locks, no clock of its own: the caller
// passes the `Replica` whose site id and hybrid logical clock stamp the writes.
//
// Two executors share it:
//   * the SmallPeer local store (Sources/SmallPeer/LocalStore+Execute.swift), which keeps documents
//     in memory and a log on disk;
//   * the server store (Sources/Store/StoreMutations.swift, InsertMerge.swift), which reads and locks
//     rows in PostgreSQL, calls these functions inside `replica.withLock { r in ... }`, and writes
//     back. What it adds is its own: batching, COPY, re-checking a filter on the locked row.
// DELETE is `Document.delete(replica:)` and EVICT drops the copy; neither needs a plan here.

import CRDT
import Values

/// Why a statement could not be applied to a document. Each case leaves the document unchanged.
public enum DocumentMutationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// INSERT with `ON ID CONFLICT FAIL` (the default) found a live document with that `_id`.
    case conflict(collection: String, id: Value)
    /// The document would exceed `documentLimitBytes` once written.
    case tooLarge(String)
    /// An expression or value failed (e.g. INCREMENT BY a string).
    case invalid(DQLEvaluationError)
    /// The CRDT engine refused the write (type mismatch, nesting, non-finite number, ...).
    case crdt(CRDTError)

    public var description: String {
        switch self {
        case .conflict(let c, let id):
            "a document with _id \(JSON.string(id)) already exists in \(c) (use ON ID CONFLICT DO UPDATE, DO UPDATE_LOCAL_DIFF or DO NOTHING)"
        case .tooLarge(let m): m
        case .invalid(let e): e.description
        case .crdt(let e): e.description
        }
    }
}

extension TypeDeclarations {
    /// These `COLLECTION name (field TYPE, ...)` declarations as the CRDT engine reads them, under
    /// the server's (or peer's) strict-mode setting. PN_COUNTER is a COUNTER in the engine.
    public func crdt(strictMode: Bool) -> CRDT.TypeDeclarations {
        var declared: [FieldPath: CRDT.FieldType] = [:]
        for (steps, t) in types {
            let path = DocumentMutations.fieldPath(steps)
            switch t {
            case .register: declared[path] = .register
            case .map: declared[path] = .map
            case .counter, .pnCounter: declared[path] = .counter
            case .attachment: declared[path] = .attachment
            }
        }
        return CRDT.TypeDeclarations(strict: strictMode, declared: declared)
    }
}

/// Helpers shared by every executor of mutation plans.
public enum DocumentMutations {
    /// A DQL path (plans never contain array indexes: `UpdatePlan` rejects them) as a CRDT field path.
    public static func fieldPath(_ steps: [PathComponent]) -> FieldPath {
        FieldPath(steps.compactMap { if case .field(let k) = $0 { k } else { nil } })
    }

    /// One field operation of an UPDATE as a CRDT operation; whether the materialized value changed.
    public static func apply(_ op: FieldOperation, to document: inout Document, types: CRDT.TypeDeclarations,
                             replica: inout Replica) throws(CRDTError) -> Bool {
        switch op {
        case .set(let steps, let v): return try document.set(fieldPath(steps), to: v, types: types, replica: &replica)
        case .unset(let steps): return try document.unset(fieldPath(steps), replica: &replica)
        case .increment(let steps, let amount, _):
            return try document.increment(fieldPath(steps), by: amount.doubleValue ?? 0, types: types, replica: &replica)
        case .restart(let steps, let value):
            return try document.restart(fieldPath(steps), with: value?.doubleValue ?? 0, types: types, replica: &replica)
        }
    }

    /// The size rule of DESIGN.md ("Limits"): above `documentLimitBytes` an error, above
    /// `documentWarningBytes` a warning (returned). Tombstones have no size.
    public static func checkSize(of document: Document) throws(DocumentMutationError) -> String? {
        guard let value = document.materialize() else { return nil }
        return try checkSize(id: document.id, serializedBytes: JSON.serializedCount(value))
    }

    /// The same rule for a document whose JSON text (`JSON.string` of its value) is already made
    /// and `serializedBytes` long: an executor that stores that text measures it rather than
    /// serializing the document twice.
    public static func checkSize(id: Value, serializedBytes size: Int) throws(DocumentMutationError) -> String? {
        if size > documentLimitBytes { throw .tooLarge("document \(JSON.string(id)) would be \(size) bytes; the limit is \(documentLimitBytes)") }
        if size > documentWarningBytes { return "document \(JSON.string(id)) is \(size) bytes; documents above \(documentWarningBytes) bytes sync slowly" }
        return nil
    }
}

/// An INSERT's documents grouped by `_id`, in order of first appearance: documents without one get
/// an id from `generateID` (and carry it in their fields); the same `_id` twice in one statement is
/// one document written twice, in statement order.
public struct InsertGroups: Sendable {
    /// Ids in order of first appearance.
    public private(set) var order: [Value] = []
    /// Ids the statement gave (an executor looks these up); a freshly generated 128-bit random id
    /// cannot exist yet.
    public private(set) var supplied: [Value] = []
    public private(set) var generated: [Value] = []
    /// Each id's versions, in statement order (`InsertPlan.apply`'s `versions`).
    public private(set) var fieldsByID: [Value: [[String: Value]]] = [:]
    /// The first form each non-string id took, by `jsonbIdentity`: `{k: 1}` and `{k: 1.0}` are
    /// one document to PostgreSQL, so they are one group here, under the form named first (two
    /// groups wrote one row twice in one transaction and failed with a conflict for ever).
    private var firstForm: [Value: Value] = [:]

    public init(_ documents: [[String: Value]], generateID: () -> Value) {
        order.reserveCapacity(documents.count)
        supplied.reserveCapacity(documents.count)
        fieldsByID.reserveCapacity(documents.count)
        for doc in documents {
            if var given = doc["_id"] {
                if case .string = given {} else {
                    let identity = given.jsonbIdentity
                    if let first = firstForm[identity] { given = first } else { firstForm[identity] = given }
                }
                // One hash lookup per document, and the document is not copied (it has its `_id`).
                if let i = fieldsByID.index(forKey: given) {
                    fieldsByID.values[i].append(doc)
                } else {
                    fieldsByID[given] = [doc]
                    supplied.append(given)
                    order.append(given)
                }
            } else {
                let id = generateID()
                generated.append(id)
                var withID = doc
                withID["_id"] = id
                fieldsByID[id] = [withID]
                order.append(id)
            }
        }
    }
}

extension InsertPlan {
    /// The CRDT field types this INSERT writes with: its declarations under its strict mode.
    public var crdtTypes: CRDT.TypeDeclarations { declarations.crdt(strictMode: strictMode) }

    /// Whether a live document with a given `_id` fails the statement (`ON ID CONFLICT FAIL`, the
    /// default, and not INITIAL).
    public var failsOnLiveDocument: Bool { policy == .fail && !initial }

    /// The statement's conflict with documents that exist before it, checked before anything is
    /// written: under `failsOnLiveDocument`, the first of `supplied` (`InsertGroups.supplied`, in
    /// statement order) that `isLive`. So FAIL names a document the store already had, even when
    /// the statement also repeats an `_id` (which `apply` then reports, if nothing existed).
    public func conflictWithExisting(_ supplied: [Value], isLive: (Value) -> Bool) -> DocumentMutationError? {
        guard failsOnLiveDocument, let id = supplied.first(where: isLive) else { return nil }
        return .conflict(collection: collection, id: id)
    }

    /// Applies this INSERT's `versions` of one document to `document` (a fresh `Document(id:)`
    /// when the store has none, or its tombstone). Returns whether the document counts as mutated
    /// (`mutatedDocumentIds`): DO NOTHING on an existing document does not; DO UPDATE always does,
    /// even with equal values (every supplied field is a new write); DO UPDATE_LOCAL_DIFF and
    /// INITIAL only when a value changed. Throws `.conflict` for FAIL on a live document; on any
    /// error the caller must discard `document` (it may hold the statement's earlier versions).
    /// `types` is `crdtTypes`, made once per statement by the caller.
    public func apply(_ versions: [[String: Value]], to document: inout Document, types: CRDT.TypeDeclarations,
                      replica: inout Replica) throws(DocumentMutationError) -> Bool {
        var changed = false
        for fields in versions {
            if initial {
                changed = try crdt { () throws(CRDTError) in try document.insertInitial(fields, types: types, replica: &replica) } || changed
            } else if document.exists {
                switch policy {
                case .fail: throw .conflict(collection: collection, id: document.id)
                case .doNothing: continue
                case .doUpdate:
                    _ = try crdt { () throws(CRDTError) in try document.upsert(fields, mode: .update, types: types, replica: &replica) }
                    changed = true  // every supplied field is a new write, even with equal values
                case .doUpdateLocalDiff:
                    changed = try crdt { () throws(CRDTError) in
                        try document.upsert(fields, mode: .updateLocalDiff, types: types, replica: &replica)
                    } || changed
                }
            } else {
                _ = try crdt { () throws(CRDTError) in try document.upsert(fields, mode: .update, types: types, replica: &replica) }
                changed = true
            }
        }
        return changed
    }
}

extension UpdatePlan {
    /// The strict-mode setting the plan was validated under.
    public var strictMode: Bool { evaluator.context.strictMode }

    /// The CRDT field types this UPDATE writes with: its declarations under its strict mode.
    public var crdtTypes: CRDT.TypeDeclarations { declarations.crdt(strictMode: strictMode) }

    /// Applies the UPDATE to one document the statement selected; `current` is its materialized
    /// value (SET expressions may read it). Returns whether the value changed and an optional size
    /// warning (the size rule applies when the statement wrote something). On error the caller must
    /// discard `document`.
    public func apply(to document: inout Document, current: Value,
                      replica: inout Replica) throws(DocumentMutationError) -> (changed: Bool, warning: String?) {
        let ops: [FieldOperation]
        do { ops = try operations(for: current) } catch { throw .invalid(error) }
        let before = document.versionVector
        let changed = try apply(ops, to: &document, types: crdtTypes, replica: &replica)
        // Only a write is checked: a document that grew past the limit through merges stays readable.
        guard document.versionVector != before else { return (changed, nil) }
        return (changed, try DocumentMutations.checkSize(of: document))
    }

    /// Applies `operations(for:)` of one document as CRDT operations, in order; whether its value
    /// changed. The size rule is the caller's (`DocumentMutations.checkSize`): an executor that
    /// serializes the document anyway measures that text. `types` is `crdtTypes`, made once per
    /// statement. On error the caller must discard `document`.
    public func apply(_ operations: [FieldOperation], to document: inout Document, types: CRDT.TypeDeclarations,
                      replica: inout Replica) throws(DocumentMutationError) -> Bool {
        var changed = false
        for op in operations {
            changed = try crdt { () throws(CRDTError) in try DocumentMutations.apply(op, to: &document, types: types, replica: &replica) } || changed
        }
        return changed
    }
}

/// Runs a CRDT operation, mapping its error into this layer's.
func crdt<T>(_ body: () throws(CRDTError) -> T) throws(DocumentMutationError) -> T {
    do { return try body() } catch { throw .crdt(error) }
}

/// DQL's total order over values (the one ORDER BY uses), for executors that keep documents in
/// memory and want a deterministic scan order (e.g. by `_id`). Negative, zero or positive.
public enum DQLValueOrder {
    public static func compare(_ a: Value?, _ b: Value?) -> Int { DQLOrder.compare(a, b) }
}
