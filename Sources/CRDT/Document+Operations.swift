// Local operations, the API DQL calls. Each one:
//   1. validates and plans its events against the current state (nothing changes on error),
//   2. takes one dot from the replica's clock; all events of the operation share one Meta, whose
//      stamp is above every stamp in the document (0 for INITIAL writes),
//   3. applies them through the same code path merges use, and records the dot in the version vector,
//   4. returns whether the materialized value changed.

import Values

extension Document {
    public enum UpsertMode: Sendable, Equatable {
        /// `ON ID CONFLICT DO UPDATE`: every supplied field becomes a new write.
        case update
        /// `ON ID CONFLICT DO UPDATE_LOCAL_DIFF`: only fields whose current value differs are written.
        case updateLocalDiff
    }

    /// Inserts the document, or updates it if it exists (an insert over a tombstone re-creates it).
    /// `fields` may contain `_id`, which must equal the document's id.
    public mutating func upsert(_ fields: [String: Value], mode: UpsertMode = .update,
                                types: TypeDeclarations = .strict, replica: inout Replica) throws(CRDTError) -> Bool {
        var plan = Plan()
        try planDocumentWrite(fields, diffOnly: mode == .updateLocalDiff && exists, types: types, into: &plan)
        return commit(plan, replica: &replica, initial: false)
    }

    /// `INSERT ... INITIAL DOCUMENTS`: writes at time zero, so any real write, here or anywhere, wins.
    /// A deleted document stays deleted.
    public mutating func insertInitial(_ fields: [String: Value], types: TypeDeclarations = .strict,
                                       replica: inout Replica) throws(CRDTError) -> Bool {
        var plan = Plan()
        try planDocumentWrite(fields, diffOnly: false, types: types, into: &plan)
        return commit(plan, replica: &replica, initial: true)
    }

    /// `UPDATE ... SET path = value`.
    public mutating func set(_ path: FieldPath, to value: Value, types: TypeDeclarations = .strict,
                             replica: inout Replica) throws(CRDTError) -> Bool {
        var plan = Plan()
        try checkWritable(path, value: value)
        try planParents(of: path, types: types, into: &plan)
        try planValue(value, at: path, diffOnly: false, types: types, into: &plan)
        return commit(plan, replica: &replica, initial: false)
    }

    /// `UPDATE ... UNSET path`: removes the field or MAP subtree as this replica sees it now.
    /// Writes it has not seen (concurrent ones stamped later) survive (docs/CRDT.md "Removal").
    public mutating func unset(_ path: FieldPath, replica: inout Replica) throws(CRDTError) -> Bool {
        try checkWritable(path)
        guard value(at: path) != nil, let slot = slot(at: path) else { return false }
        var barrier: Meta? = nil
        slot.forEachMeta { barrier = maxMeta(barrier, $0) }
        guard let b = barrier else { return false }
        var plan = Plan()
        plan.add(path, .removal(barrier: b))
        return commit(plan, replica: &replica, initial: false)
    }

    /// `APPLY path INCREMENT BY amount` (negative to decrement). A field that is not a COUNTER
    /// becomes one starting at 0 (an implicit RESTART WITH 0 in the same write).
    public mutating func increment(_ path: FieldPath, by amount: Double, types: TypeDeclarations = .strict,
                                   replica: inout Replica) throws(CRDTError) -> Bool {
        guard amount.isFinite else { throw .invalidNumber(path) }
        var plan = Plan()
        try planParents(of: path, types: types, into: &plan)
        let counter = slot(at: path)?.counter ?? CounterState()
        let own = counter.contributions[replica.site]?.total ?? 0
        let total = own + amount
        guard total.isFinite else { throw .invalidNumber(path) }
        if visibleKind(at: path) != .counter {
            plan.add(path, .restart(base: 0, observed: counter.contributions.mapValues(\.total)))
        }
        plan.add(path, .contribution(total: total))
        return commit(plan, replica: &replica, initial: false)
    }

    /// `APPLY path RESTART [WITH value]`: LWW against other restarts; increments it has not seen still count.
    public mutating func restart(_ path: FieldPath, with value: Double = 0, types: TypeDeclarations = .strict,
                                 replica: inout Replica) throws(CRDTError) -> Bool {
        guard value.isFinite else { throw .invalidNumber(path) }
        var plan = Plan()
        try planParents(of: path, types: types, into: &plan)
        plan.add(path, .restart(base: value, observed: currentTotals(at: path)))
        return commit(plan, replica: &replica, initial: false)
    }

    /// Sets an ATTACHMENT field (LWW).
    public mutating func setAttachment(_ path: FieldPath, _ token: AttachmentToken, types: TypeDeclarations = .strict,
                                       replica: inout Replica) throws(CRDTError) -> Bool {
        var plan = Plan()
        try checkWritable(path, value: .object(token.metadata))
        try planParents(of: path, types: types, into: &plan)
        plan.add(path, .register(.attachment(token)))
        return commit(plan, replica: &replica, initial: false)
    }

    /// `DELETE`: a tombstone over everything this replica has seen. It syncs like any write; a later
    /// upsert re-creates the document; a concurrent write stamped later survives it (docs/CRDT.md).
    public mutating func delete(replica: inout Replica) -> Bool {
        guard exists else { return false }
        var barrier: Meta? = nil
        root.forEachMeta { barrier = maxMeta(barrier, $0) }
        guard let b = barrier else { return false }
        var plan = Plan()
        plan.add(FieldPath([]), .removal(barrier: b))
        return commit(plan, replica: &replica, initial: false)
    }
}

// MARK: - Planning

struct Plan {
    var events: [(path: FieldPath, event: Event)] = []
    mutating func add(_ path: FieldPath, _ event: Event) { events.append((path, event)) }
}

extension Document {
    /// Deepest nesting (MAP levels of the path plus array/object levels of the value) a write may
    /// create. The decoder accepts 160 (`CBORLimits.crdt`), so every state written can be read back.
    public static let maxNestingDepth = 128

    /// JSON has no NaN or infinities, and PostgreSQL's JSONB cannot hold them: documents never do.
    static func isFinite(_ v: Value) -> Bool {
        switch v {
        case .double(let d): d.isFinite
        case .array(let a): a.allSatisfy(isFinite)
        case .object(let o): o.values.allSatisfy(isFinite)
        default: true
        }
    }

    static func nestingDepth(_ v: Value) -> Int {
        switch v {
        case .array(let a): 1 + (a.map(nestingDepth).max() ?? 0)
        case .object(let o): 1 + (o.values.map(nestingDepth).max() ?? 0)
        default: 0
        }
    }

    func checkWritable(_ path: FieldPath, value: Value? = nil) throws(CRDTError) {
        if path.keys.count + (value.map(Self.nestingDepth) ?? 0) > Self.maxNestingDepth {
            throw .tooDeep(path)
        }
        if let v = value, !Self.isFinite(v) { throw .invalidNumber(path) }
        guard let first = path.keys.first else { throw .emptyPath }
        guard first != "_id" else { throw .invalidDocumentID("_id is immutable") }
        guard exists else { throw .documentDoesNotExist }
    }

    func currentTotals(at path: FieldPath) -> [SiteID: Double] {
        (slot(at: path)?.counter?.contributions ?? [:]).mapValues(\.total)
    }

    func planDocumentWrite(_ fields: [String: Value], diffOnly: Bool, types: TypeDeclarations,
                           into plan: inout Plan) throws(CRDTError) {
        // The same id in the other number form (`{k: 1.0}` for `{k: 1}`) is this document, as
        // PostgreSQL and DQL see it; the document keeps the form it was created with.
        if let given = fields["_id"], given != id, given.jsonbIdentity != id.jsonbIdentity { throw .idMismatch }
        if Self.nestingDepth(.object(fields)) > Self.maxNestingDepth { throw .tooDeep(FieldPath([])) }
        if !Self.isFinite(.object(fields)) { throw .invalidNumber(FieldPath([])) }
        if !exists { plan.add(FieldPath([]), .marker) }
        for key in CBORKeyOrder.sorted(fields.keys) where key != "_id" {
            guard let v = fields[key] else { continue }
            try planValue(v, at: FieldPath([key]), diffOnly: diffOnly, types: types, into: &plan)
        }
    }

    /// Every ancestor of `path` must be a MAP; creates the missing ones when the typing allows it.
    func planParents(of path: FieldPath, types: TypeDeclarations, into plan: inout Plan) throws(CRDTError) {
        try checkWritable(path)
        guard path.keys.count > 1 else { return }
        for n in 1..<path.keys.count {
            let prefix = FieldPath(Array(path.keys[..<n]))
            if visibleKind(at: prefix) == .map { continue }
            guard types.mayCreateMap(at: prefix) else { throw .notAMap(prefix) }
            plan.add(prefix, .marker)
        }
    }

    func planValue(_ value: Value, at path: FieldPath, diffOnly: Bool, types: TypeDeclarations,
                   into plan: inout Plan) throws(CRDTError) {
        var type = types.type(at: path, for: value)
        if type == .map, value.objectValue == nil { type = .register }  // a non-object written to a MAP replaces it
        switch type {
        case .map:
            let o = value.objectValue ?? [:]
            if !diffOnly || visibleKind(at: path) != .map { plan.add(path, .marker) }
            for key in CBORKeyOrder.sorted(o.keys) {
                guard let v = o[key] else { continue }
                try planValue(v, at: path.appending(key), diffOnly: diffOnly, types: types, into: &plan)
            }
        case .register:
            if diffOnly, self.value(at: path) == value, visibleKind(at: path) == .other { return }
            plan.add(path, .register(.value(value)))
        case .counter:
            guard let n = value.doubleValue, n.isFinite else { throw .typeMismatch(path, expected: .counter) }
            if diffOnly, visibleKind(at: path) == .counter,
               self.value(at: path)?.doubleValue == n { return }
            plan.add(path, .restart(base: n, observed: currentTotals(at: path)))
        case .attachment:
            guard let token = AttachmentToken(materialized: value) else { throw .typeMismatch(path, expected: .attachment) }
            if diffOnly, self.value(at: path) == token.materialized { return }
            plan.add(path, .register(.attachment(token)))
        }
    }

    /// Applies a plan as one write; returns whether any affected value changed.
    mutating func commit(_ plan: Plan, replica: inout Replica, initial: Bool) -> Bool {
        guard !plan.events.isEmpty else { return false }
        let paths = Set(plan.events.map(\.path))
        let existedBefore = exists
        let before = paths.map { value(at: $0) }
        let dot = replica.nextDot(after: versionVector[replica.site])
        let stamp = initial ? 0 : max(dot.rawValue, maxStamp + 1)
        let meta = Meta(stamp: stamp, site: replica.site, dot: dot)
        for (path, event) in plan.events {
            apply(event, at: path.keys[...], meta: meta)
        }
        versionVector.raise(replica.site, to: dot)
        recent.settle(versionVector: versionVector)
        if existedBefore != exists { return true }
        return zip(paths, before).contains { value(at: $0) != $1 }
    }
}
