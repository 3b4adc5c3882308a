import CRDT
import DQL
import Postgres
import Synchronization
import Values

/// The server's half of an INSERT: merges each document's supplied fields into its current state
/// (or a new one) by the shared rules (`InsertPlan.apply`, DQL/DocumentMutations.swift) and encodes
/// the result for PostgreSQL. A pure value (`Sendable`), so a bulk INSERT can merge
/// and encode the next chunk on another thread while PostgreSQL stores the previous one
/// (`WriteTransaction.streamInsert`).
struct InsertMerge: Sendable {
    let store: DocumentStore
    let plan: InsertPlan
    let types: CRDT.TypeDeclarations
    /// The documents found under lock, by `_id`.
    let existing: [Value: Document]
    /// Every supplied document by `_id` (the same `_id` twice in one statement is one document).
    let fieldsByID: [Value: [[String: Value]]]
    /// Encode the documents this statement creates as COPY tuples (`DocumentCopy`): it creates
    /// enough of them for `write` to use COPY.
    let copyCreations: Bool
    /// Keep each changed document's value before and after (`Chunk.ruleChecks`): the caller has
    /// write rules for the collection (WriteRules.swift).
    var keepsRuleValues = false

    /// `copyCreations` defaults to whether `fieldsByID` holds enough documents for COPY; a bulk
    /// INSERT evaluated chunk by chunk (`insertEvaluatingInChunks`) sets it for every chunk.
    init(store: DocumentStore, plan: InsertPlan, existing: [Value: Document],
         fieldsByID: [Value: [[String: Value]]], copyCreations: Bool? = nil) {
        self.store = store
        self.plan = plan
        self.types = plan.crdtTypes
        self.existing = existing
        self.fieldsByID = fieldsByID
        self.copyCreations = copyCreations ?? (fieldsByID.count >= DocumentCopy.minimumRows)
    }

    /// Documents per streamed chunk: 1000 of ~1 KB is ~2 MB of upsert binds, one round trip.
    static let chunk = 1000

    /// What merging some `_id`s produced, encoded and ready for `WriteTransaction.write(_:)`.
    struct Chunk: Sendable {
        /// Documents that existed (merged into), or creations of a statement too small for COPY.
        var writes: [WriteTransaction.PendingWrite] = []
        /// With `copyCreations`: the created documents as one whole binary COPY payload (header,
        /// tuples, trailer), built here rather than on the transaction's thread, and their keys.
        var copyPayload: [UInt8]? = nil
        var created: [DocumentKey] = []
        var mutated: [Value] = []
        /// Size warnings of the documents evaluated for this chunk (`insertEvaluatingInChunks`).
        var warnings: [String] = []
        /// With `keepsRuleValues`: what the caller's write rules must allow before it is written.
        var ruleChecks: [WriteRuleCheck] = []
    }

    /// Merges and encodes these `_id`s, in order. `framed` false leaves the COPY header and
    /// trailer out of `copyPayload` (its tuples go into a COPY that spans chunks: `BulkCopyFeed`).
    func apply(_ ids: ArraySlice<Value>, framed: Bool = true) throws -> Chunk {
        var chunk = Chunk()
        var payload: [UInt8] = []
        if copyCreations {
            // ~1 KB documents: value and state each about that, in one buffer for the chunk.
            payload.reserveCapacity(ids.count * 2048 + PostgresBinaryCopy.header.count + PostgresBinaryCopy.trailer.count)
            if framed { payload += PostgresBinaryCopy.header }
        }
        chunk.writes.reserveCapacity(copyCreations ? 0 : ids.count)
        for id in ids {
            var doc = try existing[id] ?? Document(id: id)
            let before = doc.versionVector
            let valueBefore = keepsRuleValues ? doc.materialize() : nil
            let versions = fieldsByID[id] ?? []
            let changed = try store.replica.withLock { r throws(DocumentMutationError) in
                try plan.apply(versions, to: &doc, types: types, replica: &r)
            }
            // Not found under lock: `write` creates it and logs no delta for it, so none is
            // computed (a new event always advances the version vector: unchanged means empty).
            let creating = existing[id] == nil && doc.exists
            let delta = creating ? nil : doc.delta(since: before)
            if delta?.isEmpty ?? (doc.versionVector == before) { continue }
            if keepsRuleValues { chunk.ruleChecks.append(WriteRuleCheck(index: chunk.ruleChecks.count, before: valueBefore, after: doc.materialize())) }
            let key = DocumentKey(collection: plan.collection, id: id)
            if creating && copyCreations && DocumentCopy.append(collection: plan.collection, id: id, document: doc, to: &payload) {
                chunk.created.append(key)
            } else {
                let encoded = WriteTransaction.EncodedWrite(doc, creating ? nil : delta)
                chunk.writes.append(WriteTransaction.PendingWrite(key: key, document: doc, delta: delta, encoded: encoded))
            }
            if changed { chunk.mutated.append(id) }
        }
        if !chunk.created.isEmpty {
            if framed { payload += PostgresBinaryCopy.trailer }
            chunk.copyPayload = payload
        }
        return chunk
    }
}

extension WriteTransaction {
    /// A bulk INSERT in chunks: while PostgreSQL stores chunk k (a COPY of its creations, or
    /// held upserts flushed in one round trip), chunk k + 1 is merged and encoded on another
    /// thread, so the two cores work at once instead of taking turns. A statement that fails after
    /// its first chunk was sent has written part of itself: `runInTransaction` then rolls the
    /// transaction back (see `StatementFailedAfterWriting`).
    mutating func streamInsert(_ merge: InsertMerge, _ order: [Value], mutated: inout [Value]) async throws {
        var warnings: [String] = []
        let chunks = (order.count + InsertMerge.chunk - 1) / InsertMerge.chunk
        try await stream(chunks: chunks, collection: merge.plan.collection, mutated: &mutated, warnings: &warnings) { k in
            try merge.apply(order[k * InsertMerge.chunk..<min((k + 1) * InsertMerge.chunk, order.count)])
        }
    }

    /// Writes chunk 0, 1, … `chunks - 1`, each made by `make` (which merges and encodes it) on the
    /// global pool while the previous one is written.
    mutating func stream(chunks: Int, collection: String, mutated: inout [Value], warnings: inout [String],
                         _ make: @escaping @Sendable (Int) throws -> InsertMerge.Chunk) async throws {
        guard chunks > 0 else { return }
        var next = try make(0)
        for k in 1..<chunks {
            try await enforceWriteRules(next.ruleChecks, collection: collection, operation: "insert")
            // On the global pool, not inherited: the transaction runs on an event loop
            // (`WriteBatcher` prefers the caller's loop), and a child task would otherwise merge on
            // that same thread, taking turns with the COPY instead of running beside it.
            async let following = withTaskExecutorPreference(globalConcurrentExecutor) { try make(k) }
            // Started first: a COPY in `write` waits for PostgreSQL, and `following` runs meanwhile.
            try await write(next)
            mutated += next.mutated
            warnings += next.warnings
            try await db.flush()
            next = try await following
        }
        try await enforceWriteRules(next.ruleChecks, collection: collection, operation: "insert")
        try await write(next)
        mutated += next.mutated
        warnings += next.warnings
    }

    /// Writes a merged chunk: its creations by one COPY (their tuples already encoded), the rest
    /// through `write(_:kind:)`.
    mutating func write(_ chunk: InsertMerge.Chunk) async throws {
        if let payload = chunk.copyPayload, let collection = chunk.created.first?.collection {
            try await registerCollection(collection)
            forgetLockCache()
            try await db.copyIn(PostgresQuery(unsafeSQL: DocumentCopy.statement), data: payload)
            logCreatedByCopy(chunk.created)
        }
        try await write(chunk.writes, kind: "upsert")
    }

    /// Before a COPY creates rows: the lock cache may hold them as absent; dropping a cache is
    /// always correct.
    mutating func forgetLockCache() {
        if !knownAbsent.isEmpty || !lockedDocuments.isEmpty { lockedDocuments = [:]; knownAbsent = [] }
    }

    /// After a COPY created `keys`: they exist from now on, so no later statement of this
    /// transaction may take them for absent (they are created without a lookup only when none
    /// was made); and each is logged as a creation, with no delta — its state stands for it
    /// (docs/STORAGE.md, migrations/0006).
    mutating func logCreatedByCopy(_ keys: [DocumentKey]) {
        if !absentRows.isEmpty { for key in keys { absentRows.remove(key) } }
        changes.reserveCapacity(changes.count + keys.count)
        for key in keys { changes.append(ChangeRecord(key: key, kind: "upsert", delta: nil, origin: currentOrigin)) }
    }
}
