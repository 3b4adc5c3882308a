// The pure part of INSERT and UPDATE: a validated plan (Mutation.swift) plus a document's current
// CRDT state in, the updated state and "was it mutated" out. No storage, no locks, no clock of its
// own: the caller passes the `Replica` whose site id and hybrid logical clock stamp the writes.
//
// Two executors share it:
//   * the SmallPeer local store (Sources/SmallPeer), which keeps documents in memory and a log on disk;
//   * the server store (Sources/Store/StoreMutations.swift), which reads and locks rows in
//     PostgreSQL, calls these functions inside `replica.withLock { r in ... }`, and writes back.
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
        let size = JSON.serializedCount(value)
        let id = JSON.string(document.id)
        if size > documentLimitBytes { throw .tooLarge("document \(id) would be \(size) bytes; the limit is \(documentLimitBytes)") }
        if size > documentWarningBytes { return "document \(id) is \(size) bytes; documents above \(documentWarningBytes) bytes sync slowly" }
        return nil
    }
}

extension InsertPlan {
    /// The statement's documents grouped by `_id`, in order of first appearance; documents without
    /// `_id` get one from `generateID` (and carry it in their fields). The same `_id` twice in one
    /// statement is one document written twice, in statement order.
    public func documentsByID(generateID: () -> Value) -> [(id: Value, versions: [[String: Value]])] {
        var order: [Value] = []
        var byID: [Value: [[String: Value]]] = [:]
        for var doc in documents {
            let id = doc["_id"] ?? generateID()
            doc["_id"] = id
            if byID[id] == nil { order.append(id) }
            byID[id, default: []].append(doc)
        }
        return order.map { ($0, byID[$0] ?? []) }
    }

    /// Applies this INSERT's `versions` of one document to `document` (a fresh `Document(id:)`
    /// when the store has none, or its tombstone). Returns whether the document counts as mutated
    /// (`mutatedDocumentIds`): DO NOTHING on an existing document does not; DO UPDATE always does,
    /// even with equal values (every supplied field is a new write); DO UPDATE_LOCAL_DIFF and
    /// INITIAL only when a value changed. Throws `.conflict` for FAIL on a live document; on any
    /// error the caller must discard `document` (it may hold the statement's earlier versions).
    public func apply(_ versions: [[String: Value]], to document: inout Document, strictMode: Bool,
                      replica: inout Replica) throws(DocumentMutationError) -> Bool {
        let types = declarations.crdt(strictMode: strictMode)
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
                    changed = true
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

    /// Applies the UPDATE to one document the statement selected; `current` is its materialized
    /// value (SET expressions may read it). Returns whether the value changed and an optional size
    /// warning (the size rule applies when the statement wrote something). On error the caller must
    /// discard `document`.
    public func apply(to document: inout Document, current: Value,
                      replica: inout Replica) throws(DocumentMutationError) -> (changed: Bool, warning: String?) {
        let ops: [FieldOperation]
        do { ops = try operations(for: current) } catch { throw .invalid(error) }
        let types = declarations.crdt(strictMode: strictMode)
        let before = document.versionVector
        var changed = false
        for op in ops {
            changed = try crdt { () throws(CRDTError) in try DocumentMutations.apply(op, to: &document, types: types, replica: &replica) } || changed
        }
        // Only a write is checked: a document that grew past the limit through merges stays readable.
        guard document.versionVector != before else { return (changed, nil) }
        return (changed, try DocumentMutations.checkSize(of: document))
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
