import CRDT
import DQL
import Postgres
import Synchronization
import Values

/// INSERT, UPDATE, DELETE, EVICT and ALTER SYSTEM as CRDT operations. Each statement reads and
/// computes first, then writes (see `WriteBatcher`), so its errors leave nothing behind — except
/// a bulk INSERT, which streams its documents in chunks (`streamInsert`); if it fails after its
/// first chunk, `runInTransaction` rolls the whole transaction back instead.
extension WriteTransaction {
    mutating func insert(_ plan: InsertPlan) async throws -> ExecuteResult {
        let groups = InsertGroups(plan.documents, generateID: store.generateID)
        let (order, supplied, generated, fieldsByID) = (groups.order, groups.supplied, groups.generated, groups.fieldsByID)
        // A generated id cannot exist yet: it is created with a plain INSERT (cheaper than an
        // upsert's speculative insertion; a 2^-128 collision would fail and rerun with new ids),
        // or by COPY when the statement is large enough, which needs no record of it.
        if fieldsByID.count < DocumentCopy.minimumRows {
            for id in generated { absentRows.insert(DocumentKey(collection: plan.collection, id: id)) }
        }
        let existing: [Value: Document]
        if createsWithoutLookup && plan.failsOnLiveDocument && supplied.count >= DocumentCopy.minimumRows {
            // Such an INSERT fails as a whole if any of its documents exists, so in the common
            // case — none does — looking them up (a locking read of every `_id`) is wasted work.
            // Create them all instead: a row with one of these ids (live, a tombstone, or created
            // concurrently) fails the COPY with 23505 on documents_pkey, which aborts the
            // transaction before COMMIT, and `withWriteTransaction` reruns it with lookups
            // (`createsWithoutLookup` off): the rerun then reports the conflict, or merges into
            // the tombstone, exactly as a first attempt with lookups would have.
            // (Not recorded in `absentRows`: every creation of such a statement goes by COPY,
            // `write(_ chunk:)`, which needs no record of what was found absent.)
            existing = [:]
        } else {
            existing = try await lockDocuments(plan.collection, supplied)
        }
        var merge = InsertMerge(store: store, plan: plan, existing: existing, fieldsByID: fieldsByID)
        merge.keepsRuleValues = writeRules.condition(for: plan.collection) != nil
        // Found before anything is written (a streamed INSERT would otherwise fail midway).
        if let conflict = plan.conflictWithExisting(supplied, isLive: { existing[$0]?.exists == true }) { throw conflict }
        var mutated: [Value] = []
        if order.count <= InsertMerge.chunk {
            let part = try merge.apply(order[...])
            try await enforceWriteRules(part.ruleChecks, collection: plan.collection, operation: "insert")
            try await write(part)
            mutated = part.mutated
        } else {
            try await streamInsert(merge, order, mutated: &mutated)
        }
        return ExecuteResult(transactionID: 0, queryType: "insert", mutatedDocumentIDs: mutated, warnings: plan.warnings)
    }

    /// Whether `insertEvaluatingInChunks` may run this INSERT: a plain one (no ON ID CONFLICT, not
    /// INITIAL) of more than one chunk, in a first attempt (which creates without lookups).
    func evaluatesInChunks(_ s: InsertStatement) -> Bool {
        createsWithoutLookup && s.conflictPolicy == .fail && !s.initial && s.documents.count > InsertMerge.chunk
    }

    /// A plain bulk INSERT whose documents are evaluated, grouped by `_id` and merged a chunk at a
    /// time, on the global pool while PostgreSQL stores the previous chunk: its first COPY starts
    /// after one chunk's work instead of the whole statement's (evaluating 100,000 documents and
    /// grouping them took ~0.1 s before anything was sent).
    ///
    /// Every document is created without a lookup, by COPY, as in `insert` for such a statement.
    /// The same `_id` twice within a chunk is one document, as always; twice in different chunks,
    /// or an `_id` that exists, fails a COPY with 23505 on documents_pkey, and the rerun (with
    /// lookups: `evaluatesInChunks` is false then) takes `insert`, which groups the whole
    /// statement. An evaluation error in a later chunk fails the statement after it has written:
    /// the transaction rolls back (`runInTransaction`), so nothing of it remains either way.
    mutating func insertEvaluatingInChunks(_ s: InsertStatement, context: EvaluationContext) async throws -> ExecuteResult {
        let plan = InsertPlan(unevaluated: s, context: context)
        let store = store
        let count = s.documents.count
        var mutated: [Value] = []
        var warnings: [String] = []
        mutated.reserveCapacity(count)
        let chunks = (count + InsertMerge.chunk - 1) / InsertMerge.chunk
        let (rules, now) = (writeRules, writeRulesNow)
        let make: @Sendable (Int) throws -> InsertMerge.Chunk = { k in
            let range = k * InsertMerge.chunk..<min((k + 1) * InsertMerge.chunk, count)
            let evaluated = try store.evaluateInsertDocuments(s, range, context: context)
            let groups = InsertGroups(evaluated.documents, generateID: store.generateID)
            var merge = InsertMerge(store: store, plan: plan, existing: [:], fieldsByID: groups.fieldsByID, copyCreations: true)
            merge.keepsRuleValues = rules.condition(for: plan.collection) != nil
            var chunk = try merge.apply(groups.order[...], framed: false)
            // Made on the global pool (never on a loop): the rules are checked right here.
            let refused = try rules.refused(chunk.ruleChecks, in: plan.collection, now: now)
            if !refused.isEmpty { throw rules.refusal(of: refused, among: chunk.ruleChecks, in: plan.collection, operation: "insert") }
            chunk.warnings = evaluated.warnings
            return chunk
        }
        // Chunk 0 before anything is sent: an error in it leaves the transaction clean.
        // (On the global pool, as the later chunks: not on the loop driving this transaction.)
        let first = try await Task(executorPreference: globalConcurrentExecutor) { try make(0) }.value
        // Chunk 1 on is made from now on, while chunk 0 is stored.
        let feed = BulkCopyFeed(from: 1, chunks: chunks, make: make)
        try await registerCollection(plan.collection)
        forgetLockCache()
        do {
            // Chunk 0 in a COPY of its own: the usual way a plain bulk INSERT fails — an import
            // run again, whose documents exist — shows in its first rows, and a streamed COPY
            // reads the server's error only after its last piece (it would make and send the whole
            // statement first).
            if let tuples = first.copyPayload {
                try await db.copyIn(PostgresQuery(unsafeSQL: DocumentCopy.statement),
                                    data: PostgresBinaryCopy.header + tuples + PostgresBinaryCopy.trailer)
            }
            if chunks > 1 { try await db.copyIn(PostgresQuery(unsafeSQL: DocumentCopy.statement), from: feed.next) }
        } catch {
            feed.cancel()
            // A COPY had started: whatever failed (PostgreSQL, or a later chunk's evaluation or
            // merge), the transaction is aborted and must not go on to COMMIT.
            failedMidStatement = true
            throw error
        }
        var later: [PendingWrite] = []
        for chunk in [first] + feed.sent {
            logCreatedByCopy(chunk.created)
            mutated += chunk.mutated
            warnings += chunk.warnings
            later += chunk.writes  // none in practice (a creation from fields is never a tombstone)
        }
        try await write(later, kind: "upsert")
        return ExecuteResult(transactionID: 0, queryType: "insert", mutatedDocumentIDs: mutated, warnings: warnings)
    }

    mutating func update(_ u: UpdateStatement, context: EvaluationContext) async throws -> ExecuteResult {
        let plan = try UpdatePlan(u, context: context)
        let types = plan.crdtTypes
        let ids = try await candidates(u.collection, filter: u.filter, orderBy: u.orderBy, limit: u.limit, offset: u.offset, context: context)
        let docs = try await lockDocuments(u.collection.name, ids)
        let locked = ids.compactMap { id in docs[id].map { (id, $0) } }
        let recheck = try filterQuery(u.collection, u.filter, context)
        // What to change in each locked document that still matches: pure, so off the loop when heavy.
        let planned = try await evaluate(context) { context -> [(id: Value, operations: [FieldOperation])] in
            let (recheck, plan) = (recheck.budgeted(context.budget), plan.budgeted(context.budget))
            return try locked.compactMap { id, doc in
                try context.budget?.charge(1)
                guard let current = doc.materialize(), try recheck.matches(current) else { return nil }
                return (id, try plan.operations(for: current))
            }
        }
        var writes: [PendingWrite] = []
        var mutated: [Value] = []
        var warnings: [String] = []
        // The selection holds only documents the write rules allow (`restrictingWrites`); what
        // the statement makes of them must match them too.
        let ruled = writeRules.condition(for: u.collection.name) != nil
        var ruleChecks: [WriteRuleCheck] = []
        for (id, operations) in planned {
            guard var doc = docs[id] else { continue }
            let before = doc.versionVector
            let changed = try store.replica.withLock { r throws(DocumentMutationError) in
                try plan.apply(operations, to: &doc, types: types, replica: &r)
            }
            let delta = doc.delta(since: before)
            guard !delta.isEmpty else { continue }
            // The value's JSON text is made once: for the size limit, then as the column `write` sends.
            var encoded: EncodedWrite? = nil
            if let value = doc.materialize() {
                let json = JSON.string(value)
                if let warning = try DocumentMutations.checkSize(id: id, serializedBytes: json.utf8.count) { warnings.append(warning) }
                encoded = EncodedWrite(value: PostgresJSON(json), state: PostgresBytea(doc.encode()), delta: delta.encode())
                if ruled { ruleChecks.append(WriteRuleCheck(index: ruleChecks.count, before: nil, after: value)) }
            }
            writes.append(PendingWrite(key: DocumentKey(collection: u.collection.name, id: id), document: doc, delta: delta, encoded: encoded))
            if changed { mutated.append(id) }
        }
        try await enforceWriteRules(ruleChecks, collection: u.collection.name, operation: "update")
        try await write(writes, kind: "upsert")
        return ExecuteResult(transactionID: 0, queryType: "update", mutatedDocumentIDs: mutated, warnings: warnings)
    }

    /// DELETE writes a tombstone that syncs; EVICT removes BigPeer's copy without one (peers keep theirs).
    mutating func remove(_ r: RemoveStatement, context: EvaluationContext, evict: Bool) async throws -> ExecuteResult {
        let ids = try await candidates(r.collection, filter: r.filter, context: context)
        let docs = try await lockDocuments(r.collection.name, ids)
        let locked = ids.compactMap { id in docs[id].map { (id, $0) } }
        let recheck = try filterQuery(r.collection, r.filter, context)
        let matched = try await evaluate(context) { context -> [Value] in
            let recheck = recheck.budgeted(context.budget)
            return try locked.compactMap { id, doc in
                try context.budget?.charge(1)
                guard let current = doc.materialize(), try recheck.matches(current) else { return nil }
                return id
            }
        }
        let queryType = evict ? "evict" : "delete"
        if evict {
            for chunk in stride(from: 0, to: matched.count, by: 1000) {
                let part = PostgresArray<PostgresJSON>(matched[chunk..<min(chunk + 1000, matched.count)].map { PostgresJSON(JSON.string($0)) })
                try await db.enqueue("DELETE FROM documents WHERE collection = \(r.collection.name) AND id = ANY(\(part)::jsonb[])")
            }
            for id in matched {
                let key = DocumentKey(collection: r.collection.name, id: id)
                changes.append(ChangeRecord(key: key, kind: "evict", delta: nil))
                remember(key, nil)
                absentRows.insert(key)  // deleted by us: a later INSERT in this transaction creates it anew
            }
            return ExecuteResult(transactionID: 0, queryType: queryType, mutatedDocumentIDs: matched)
        }
        var writes: [PendingWrite] = []
        for id in matched {
            guard var doc = docs[id] else { continue }
            let before = doc.versionVector
            _ = store.replica.withLock { r in doc.delete(replica: &r) }
            writes.append(PendingWrite(key: DocumentKey(collection: r.collection.name, id: id), document: doc, delta: doc.delta(since: before)))
        }
        try await write(writes, kind: "delete")
        return ExecuteResult(transactionID: 0, queryType: queryType, mutatedDocumentIDs: matched)
    }

    mutating func system(_ command: SystemCommand) async throws -> ExecuteResult {
        switch command {
        case .set(let name, let expression):
            let value = try Evaluator(context: EvaluationContext()).evaluate(expression, in: nil) ?? .null
            let (setting, checked) = try SystemSetting.validate(name: name, value: value)
            try await db.enqueue("""
                INSERT INTO bigpeer_settings (name, value) VALUES (\(setting.rawValue), \(PostgresJSON(JSON.string(checked))))
                ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
                """)
            if setting == .strictMode { strictMode = checked.boolValue ?? true }
        case .reset(let name):
            if let name {
                guard let setting = SystemSetting(rawValue: name.uppercased()) else { throw StoreError.invalid("unknown setting \(name)") }
                try await db.enqueue("DELETE FROM bigpeer_settings WHERE name = \(setting.rawValue)")
            } else {
                try await db.enqueue("DELETE FROM bigpeer_settings")
            }
            // This transaction's own, uncommitted change: read it, never the remembered value.
            strictMode = DocumentStore.strictMode(try DocumentStore.decodeSettings(try await db.query(DocumentStore.settingsQuery))[SystemSetting.strictMode.rawValue])
        case .show:
            throw StoreError.invalid("SHOW is not a write")
        }
        return ExecuteResult(transactionID: 0, queryType: "alter")
    }

    // MARK: - Helpers

    /// `_id`s of the documents a filter selects, in the statement's order (pushdown + memory).
    func candidates(_ collection: CollectionReference, filter: Expression?, orderBy: [OrderingTerm] = [],
                    limit: Expression? = nil, offset: Expression? = nil, context: EvaluationContext) async throws -> [Value] {
        if orderBy.isEmpty, limit == nil, offset == nil, let id = Self.leadingPointID(filter, arguments: context.arguments) {
            // `WHERE _id = <string>`, alone or with conditions ANDed to it (a caller's rules:
            // `DocumentRules.restricting`): the one candidate is that id. No query: the caller
            // locks it (absent or deleted: nothing to do) and re-checks the whole filter on what
            // it locked.
            return [.string(id)]
        }
        let plan = try store.planner.planFilter(collection: collection, filter: filter, orderBy: orderBy, limit: limit,
                                                offset: offset, context: context)
        let rows = try await db.query(PostgresQuery(unsafeSQL: plan.sql, binds: plan.parameters.map(\.postgresBind)))
        let memory = plan.memoryQuery
        // A SELECT's memory stage in all but name: the same timeout, from this stage's start.
        let deadline = store.statementTimeout.map { ContinuousClock.now + $0 }
        return try await InMemoryEvaluation.run(deadline: deadline, maxSteps: context.budget?.maxSteps ?? .max) { budget in
            try budget.charge(DecodeCost.steps(rows, column: 0))
            var docs: [Value] = []
            for row in rows { docs.append(try DocumentStore.decodeJSON(row, column: 0)) }
            return try memory.budgeted(budget).run(docs).compactMap { $0["_id"] }
        }
    }

    /// The `_id` of a filter that is `_id = <string>` or its leftmost conjunct.
    static func leadingPointID(_ filter: Expression?, arguments: [String: Value]) -> String? {
        var node = filter
        while true {
            if let id = DocumentStore.pointID(node, arguments: arguments) { return id }
            guard case .binary(.and, let left, _)? = node else { return nil }
            node = left
        }
    }

    /// The filter alone, to re-check a document once it is locked (it may have changed meanwhile).
    func filterQuery(_ collection: CollectionReference, _ filter: Expression?, _ context: EvaluationContext) throws -> SelectQuery {
        var s = SelectStatement(projections: [.all], from: collection)
        s.filter = filter
        return try SelectQuery(s, context: context)
    }
}
