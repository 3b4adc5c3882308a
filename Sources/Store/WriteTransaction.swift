import Quoting
import CRDT
import DQL
import Postgres
import Synchronization
import Values

extension DocumentStore {
    /// Runs write statements in one transaction: per statement a result (or its own error), and
    /// the transaction number of the commit.
    func runInTransaction(_ jobs: [WriteBatcher.Job]) async throws -> ([Result<ExecuteResult, StoreError>], Int64) {
        var attempts = 0
        let (results, txn) = try await commitWrite { db in
            attempts += 1
            var tx = WriteTransaction(store: self, db: db, strictMode: try await self.strictMode(in: db))
            // A rerun (after a unique violation among others) looks every document up first.
            tx.createsWithoutLookup = attempts == 1
            if jobs.count > 1 { try await tx.prefetchInsertTargets(jobs) }
            var results: [Result<ExecuteResult, StoreError>] = []
            for (i, job) in jobs.enumerated() {
                let logged = tx.changes.count
                do {
                    results.append(.success(try await tx.run(job, prefetched: tx.prefetchedInserts.removeValue(forKey: i))))
                } catch let e as PostgresError {
                    throw e  // the transaction is aborted: the batcher reruns statements one by one
                } catch {
                    // A statement that failed after it had written something (a streamed bulk
                    // INSERT, a sync upload spanning collections) must not commit half: roll the
                    // transaction back; the batcher then reruns every statement alone.
                    if tx.changes.count != logged || tx.failedMidStatement {
                        throw jobs.count == 1 ? StoreError.from(error) : StatementFailedAfterWriting(error: StoreError.from(error))
                    }
                    results.append(.failure(StoreError.from(error)))
                }
            }
            return (results, tx)
        }
        // This instance changed settings: the next transaction reads them rather than failing its check.
        if jobs.contains(where: { if case .statement(.system, _) = $0.work { true } else { false } }) { forgetRememberedSettings() }
        return (results, txn)
    }
}

/// A statement of a group-committed batch failed after it had written part of its changes: the
/// batch's transaction rolls back and `WriteBatcher` reruns each statement in its own.
struct StatementFailedAfterWriting: Error {
    var error: StoreError
}

/// The state of one write transaction: the session, the strict-mode setting, and the changes to
/// append to the change log at commit.
///
/// Round trips: statements whose results are not needed (document upserts, EVICT deletes,
/// settings writes, analytics views) are held by `db` and sent with the next statement that needs a
/// result, so a one-document INSERT costs three: BEGIN + settings, the row lock, and upsert +
/// counter/change log/notify + COMMIT (`finish`).
struct WriteTransaction {
    let store: DocumentStore
    let db: PostgresPipelinedTransaction
    var strictMode: Bool
    var changes: [ChangeRecord] = []
    /// Collections this transaction registered (cached by the store once it commits).
    var registeredCollections: [String] = []

    struct ChangeRecord {
        var key: DocumentKey
        var kind: String
        var delta: [UInt8]?
        /// The uploading peer's site id for sync uploads (change_log.origin, migrations/0005).
        var origin: Int64? = nil
    }
    /// Origin recorded with the changes `write` appends (set while merging a sync upload).
    var currentOrigin: Int64?
    /// Documents this transaction has locked or written, as it sees them now (a written one holds
    /// exactly the state its held upsert writes), and ids it looked up and found absent. A pure
    /// cache of what the database would answer once held statements are sent, so it may be
    /// dropped at any time (it is, past `lockCacheLimit` entries); it saves the lock round trip
    /// when several statements of one group-committed batch touch the same documents.
    var lockedDocuments: [DocumentKey: Document] = [:]
    var knownAbsent: Set<DocumentKey> = []
    static let lockCacheLimit = 4096
    /// Ids per `SELECT … FOR UPDATE` (one round trip each; a bulk INSERT of 100,000 given ids
    /// spends 10, and the array bind stays a few hundred KB).
    static let lockChunk = 10_000
    /// Documents this transaction looked up under lock and found without a row (or evicted), and
    /// has not written since. Not a cache: `write` creates exactly these with a plain INSERT, so a
    /// concurrent creator of the same `_id` makes this transaction fail (23505 on documents_pkey)
    /// instead of being overwritten; `withWriteTransaction` then reruns it (docs/STORAGE.md).
    var absentRows: Set<DocumentKey> = []
    /// The small INSERTs of the batch as `prefetchInsertTargets` evaluated them, by job index:
    /// `run` takes its job's plan instead of evaluating the documents a second time.
    var prefetchedInserts: [Int: InsertPlan] = [:]
    /// A bulk INSERT without ON ID CONFLICT may create its documents without looking them up first
    /// (`StoreMutations.insert`). Off when the transaction is rerun.
    var createsWithoutLookup = true
    /// A statement failed after its streamed COPY had started (`insertEvaluatingInChunks`): the
    /// transaction is aborted in PostgreSQL even if nothing reached the change log yet.
    var failedMidStatement = false
    /// The write rules of the job running now (WriteRules.swift), and its time (`now()` in a rule).
    var writeRules = DocumentRules.none
    var writeRulesNow: Int64 = 0

    /// A document after a statement changed it, ready to be written.
    struct PendingWrite: Sendable {
        var key: DocumentKey
        var document: Document
        /// nil for a creation that did not compute it (`InsertMerge`): it is `document`'s whole state.
        var delta: Delta?
        /// The columns and change-log delta, when already encoded (off the writing task: `InsertMerge`).
        var encoded: EncodedWrite? = nil
    }

    /// What `write` sends for one document, encoded off the writing task (`InsertMerge`): its
    /// columns and change-log delta (nil for a creation, which logs none). Whatever is missing,
    /// `write` encodes itself.
    struct EncodedWrite: Sendable {
        var value: PostgresJSON? = nil
        var state: PostgresBytea? = nil
        var delta: [UInt8]? = nil

        init(value: PostgresJSON?, state: PostgresBytea, delta: [UInt8]?) {
            self.value = value
            self.state = state
            self.delta = delta
        }

        /// The columns, and the delta unless `delta` is nil (a creation logs none).
        init(_ document: Document, _ delta: Delta?) {
            value = document.materialize().map { PostgresJSON(JSON.string($0)) }
            state = PostgresBytea(document.encode())
            self.delta = delta?.encode()
        }
    }

    init(store: DocumentStore, db: PostgresPipelinedTransaction, strictMode: Bool) {
        self.store = store
        self.db = db
        self.strictMode = strictMode
    }

    /// `prefetched`: the job's INSERT as `prefetchInsertTargets` evaluated it, if it did.
    mutating func run(_ job: WriteBatcher.Job, prefetched: InsertPlan? = nil) async throws -> ExecuteResult {
        let statement: Statement, arguments: [String: Value]
        (writeRules, writeRulesNow) = (job.writeRules, job.nowMillis)
        switch job.work {
        case .merge(let items, let origin, let checkpoints):
            let result = try await merge(items, origin: origin, now: job.nowMillis)
            // Not over a delta that did not apply: the checkpoint would cover a change not held
            // here, which the sender must first send whole (`want`).
            if let checkpoints, !result.rejections.contains(where: { $0.message == DocumentStore.deltaGapRejection }) {
                try await save(checkpoints, site: origin)
            }
            return result
        case .statement(let s, let a): (statement, arguments) = (s, a)
        }
        // Writes evaluate inside their transaction, driven from the drain task's loop: capped in
        // steps (a 400 beyond), not by the clock, since a bulk INSERT interleaves evaluation with
        // its COPYs and may rightly take longer in total than one statement may in PostgreSQL.
        // Every part of that evaluation moves off the loop when heavy (`evaluate`).
        let budget = EvaluationBudget(maxSteps: InMemoryEvaluation.writeStatementSteps)
        let context = EvaluationContext(arguments: arguments, nowMilliseconds: job.nowMillis, strictMode: strictMode, budget: budget)
        switch statement {
        case .insert(let s) where evaluatesInChunks(s): return try await insertEvaluatingInChunks(s, context: context)
        case .insert(let s):
            // Evaluated once: the look-ahead's plan has the same arguments and clock; it is used
            // unless a statement before this one in the batch changed the strict mode.
            if let prefetched, prefetched.strictMode == strictMode { return try await insert(prefetched) }
            let store = store
            return try await insert(evaluate(context) { context in try store.insertPlan(s, context: context) })
        case .update(let u): return try await update(u, context: context)
        case .delete(let r): return try await remove(r, context: context, evict: false)
        case .evict(let r): return try await remove(r, context: context, evict: true)
        case .system(let command): return try await system(command)
        default: throw StoreError.invalid("\(statement.queryType) is not a write")
        }
    }

    // MARK: - Finish

    /// Takes the next transaction number (in commit order: see migrations/0002), appends the
    /// change log, notifies listeners and COMMITs — the counter UPDATE, the change-log INSERT and
    /// COMMIT, sent in one round trip with every write still held (more than 1000 changes:
    /// `finishByCopy`). With no change, returns the current number and no changes.
    /// Returns only after COMMIT succeeded.
    mutating func finish() async throws -> Committed {
        if changes.isEmpty {
            let n = try await db.commit(after: "SELECT n FROM bigpeer_txn")?[0].decode(0, as: Int64.self) ?? 0
            return Committed(transaction: n, changes: [])
        }
        if changes.count > Self.changeLogChunk { return Committed(transaction: try await finishByCopy(), changes: changes) }
        // The counter row stays locked from this UPDATE to the end of COMMIT (the commit-ordering
        // argument in docs/STORAGE.md); the change-log rows read the new number back with a
        // subselect (a transaction sees its own UPDATE), and pg_notify is delivered at COMMIT.
        // Two plain statements rather than one data-modifying CTE: PostgreSQL replans such a CTE
        // on every execution (it never settles on a generic plan across transactions), while
        // these two are planned once per session.
        var counter: PostgresQuery = "UPDATE bigpeer_txn SET n = n + 1 RETURNING n, pg_notify('bigpeer_changes', n::text)"
        counter.prepared = true
        var log: PostgresQuery
        if changes.count == 1, let c = changes.first {
            // One change (a point write): scalar parameters, no arrays.
            log = """
                INSERT INTO change_log (txn, seq, collection, id, kind, delta, origin)
                VALUES ((SELECT n FROM bigpeer_txn), 0, \(c.key.collection), \(c.key.idJSON)::jsonb, \(c.kind), \(c.delta.map(PostgresBytea.init))::bytea, \(c.origin)::int8)
                """
        } else {
            let a = changeLogArrays(0)
            log = """
                INSERT INTO change_log (txn, seq, collection, id, kind, delta, origin)
                SELECT (SELECT n FROM bigpeer_txn), (ord - 1)::int, c, i, k, d, o
                FROM unnest(\(a.collections)::text[], \(a.ids)::jsonb[], \(a.kinds)::text[], \(a.deltas)::bytea[], \(a.origins)::int8[]) WITH ORDINALITY AS u(c, i, k, d, o, ord)
                """
        }
        log.prepared = true
        guard let row = try await db.commit(afterAll: [counter, log]).first?.first else { throw StoreError.corrupt("bigpeer_txn has no row") }
        return Committed(transaction: try row.decode(0, as: Int64.self), changes: changes)
    }

    static let changeLogChunk = 1000
    static let prebuiltChangeLogBytes = 8 << 20

    /// What an upsert of documents (`AS d`) does to a row that exists: the new value and state;
    /// a tombstone keeps the time it was first deleted.
    static let upsertConflictClause = """
        ON CONFLICT (collection, id) DO UPDATE SET
            value = EXCLUDED.value, state = EXCLUDED.state, deleted = EXCLUDED.deleted,
            deleted_at = CASE WHEN EXCLUDED.deleted THEN coalesce(d.deleted_at, now()) END,
            updated_at = now()
        """

    /// The change-log columns of `changes[start ..< start + changeLogChunk]` as array binds.
    struct ChangeLogArrays {
        var collections = PostgresArray<String>([]), ids = PostgresArray<PostgresJSON>([]), kinds = PostgresArray<String>([])
        var deltas = PostgresArray<PostgresBytea>([]), origins = PostgresArray<Int64>([])
    }

    func changeLogArrays(_ start: Int) -> ChangeLogArrays {
        let part = changes[start..<min(start + Self.changeLogChunk, changes.count)]
        return ChangeLogArrays(
            collections: PostgresArray(part.map { $0.key.collection }), ids: PostgresArray(part.map { $0.key.idJSON }),
            kinds: PostgresArray(part.map { $0.kind }), deltas: PostgresArray(part.map { $0.delta.map(PostgresBytea.init) }),
            origins: PostgresArray(part.map(\.origin)))
    }

    // MARK: - Reading documents under lock

    /// Loads and locks the documents with these ids (missing ones are absent from the result, and
    /// recorded in `absentRows`). Locks are taken in id order so concurrent transactions do not
    /// deadlock on each other. A row lock lives in the tuple header, not in PostgreSQL's shared
    /// lock table, so a statement may lock any number of documents. Documents this transaction
    /// already holds come from `lockedDocuments` (no round trip).
    mutating func lockDocuments(_ collection: String, _ ids: [Value]) async throws -> [Value: Document] {
        var out: [Value: Document] = [:]
        var missing: [Value] = []
        if lockedDocuments.isEmpty && knownAbsent.isEmpty {
            missing = ids  // nothing cached (always so for a statement's first lookup)
        } else {
            for id in ids {
                let key = DocumentKey(collection: collection, id: id)
                if let doc = lockedDocuments[key] { out[id] = doc } else if !knownAbsent.contains(key) { missing.append(id) }
            }
        }
        for chunk in stride(from: 0, to: missing.count, by: Self.lockChunk) {
            var lock: PostgresQuery
            if missing.count == 1 {
                // One id (a point UPDATE/DELETE, a one-document INSERT): `id = $2` settles on
                // PostgreSQL's generic plan, a primary-key probe; `= ANY($2)` of an array is
                // planned again on every execution (its generic plan estimates many rows).
                lock = "SELECT id, state FROM documents WHERE collection = \(collection) AND id = \(PostgresJSON(JSON.string(missing[0])))::jsonb FOR UPDATE"
            } else {
                let part = PostgresArray<PostgresJSON>(missing[chunk..<min(chunk + Self.lockChunk, missing.count)].map { PostgresJSON(JSON.string($0)) })
                lock = """
                    SELECT id, state FROM documents WHERE collection = \(collection) AND id = ANY(\(part)::jsonb[])
                    ORDER BY id FOR UPDATE
                    """
            }
            lock.prepared = true
            let rows = try await db.query(lock)
            let asked = AskedIDs(missing[chunk..<min(chunk + Self.lockChunk, missing.count)])
            for row in rows {
                let id = try DocumentStore.decodeJSON(row, column: 0)
                let state = try row.decode(1, as: PostgresBytea.self)
                let doc: Document
                do { doc = try Document.decode(state.bytes) } catch {
                    throw StoreError.corrupt("document \(JSON.string(id)) in \(collection): \(error)")
                }
                for form in asked.forms(of: id) { out[form] = doc }
            }
        }
        absentRows.reserveCapacity(absentRows.count + missing.count)
        for id in missing {
            let key = DocumentKey(collection: collection, id: id)
            if out[id] == nil { absentRows.insert(key) } else { absentRows.remove(key) }
        }
        if lockedDocuments.count + knownAbsent.count + missing.count > Self.lockCacheLimit {
            lockedDocuments = [:]
            knownAbsent = []
        } else {
            for id in missing {
                let key = DocumentKey(collection: collection, id: id)
                if let doc = out[id] { lockedDocuments[key] = doc } else { knownAbsent.insert(key) }
            }
        }
        return out
    }

    /// Locks, in one round trip per collection, every document that the batch's small INSERTs name
    /// by `_id` (and its UPDATEs, DELETEs and EVICTs by `_id = <string>`), so each statement then
    /// finds its documents in `lockedDocuments` instead of spending its own round trip. Only an optimization: a statement whose plan fails here is skipped (it fails
    /// on its own later), and the locks are the ones those statements would take anyway.
    mutating func prefetchInsertTargets(_ jobs: [WriteBatcher.Job]) async throws {
        var ids: [String: [Value]] = [:]
        var seen = Set<DocumentKey>()
        for (index, job) in jobs.enumerated() {
            // UPDATE, DELETE and EVICT `WHERE _id = <string>` lock exactly that id (`pointID`).
            if case .statement(let statement, let arguments) = job.work,
               let (collection, id) = Self.pointTarget(statement, arguments: arguments),
               seen.insert(DocumentKey(collection: collection, id: .string(id))).inserted {
                ids[collection, default: []].append(.string(id))
                continue
            }
            guard case .statement(.insert(let s), let arguments) = job.work, s.documents.count <= 64 else { continue }
            // Only a look-ahead for the ids to lock: a loop's share of steps, else skip it (the
            // statement's own evaluation then runs under the write cap and reports the problem).
            let context = EvaluationContext(arguments: arguments, nowMilliseconds: job.nowMillis, strictMode: strictMode,
                                            budget: EvaluationBudget(maxSteps: InMemoryEvaluation.onLoopSteps))
            guard let plan = try? store.insertPlan(s, context: context) else { continue }
            prefetchedInserts[index] = plan  // `run` takes it rather than evaluate the documents again
            for doc in plan.documents {
                guard let id = doc["_id"], seen.insert(DocumentKey(collection: plan.collection, id: id)).inserted else { continue }
                ids[plan.collection, default: []].append(id)
            }
        }
        for collection in ids.keys.sorted() {
            _ = try await lockDocuments(collection, ids[collection] ?? [])
        }
    }

    /// The collection and id an UPDATE, DELETE or EVICT by `_id = <string>` locks (no ORDER BY,
    /// LIMIT or OFFSET: then the id is its only candidate, as `candidates` decides).
    static func pointTarget(_ statement: Statement, arguments: [String: Value]) -> (String, String)? {
        switch statement {
        case .update(let u) where u.orderBy.isEmpty && u.limit == nil && u.offset == nil:
            return DocumentStore.pointID(u.filter, arguments: arguments).map { (u.collection.name, $0) }
        case .delete(let r), .evict(let r):
            return DocumentStore.pointID(r.filter, arguments: arguments).map { (r.collection.name, $0) }
        default:
            return nil
        }
    }

    /// Records what this transaction wrote (or evicted) in the lock cache.
    mutating func remember(_ key: DocumentKey, _ document: Document?) {
        if lockedDocuments.count + knownAbsent.count >= Self.lockCacheLimit {
            lockedDocuments = [:]
            knownAbsent = []
        }
        if let document {
            lockedDocuments[key] = document
            knownAbsent.remove(key)
        } else {
            lockedDocuments[key] = nil
            knownAbsent.insert(key)
        }
    }

    // MARK: - Writing documents

    /// Writes changed documents (state + materialized value in one statement) and records their
    /// deltas for the change log. Documents found absent under lock (`absentRows`) are created with
    /// a plain INSERT, never an upsert: if another transaction created the same `_id` since we
    /// looked, the INSERT waits for it and fails with 23505 when it commits, rather than
    /// overwriting its acknowledged write. Freshly generated ids are created the same way; rows
    /// we hold locked are upserted.
    mutating func write(_ writes: [PendingWrite], kind: String) async throws {
        guard let collection = writes.first?.key.collection else { return }
        try await registerCollection(collection)
        var created: [PendingWrite] = [], updated: [PendingWrite] = []
        var creates: [Bool] = []
        creates.reserveCapacity(writes.count)
        for w in writes {
            let creating = absentRows.remove(w.key) != nil
            creates.append(creating)
            if creating { created.append(w) } else { updated.append(w) }
        }
        // Many creations go by COPY (a bulk INSERT's are already encoded for it: `InsertMerge`);
        // tombstones and a few creations by a plain INSERT. Either fails with 23505 if someone
        // else created one.
        if created.count >= DocumentCopy.minimumRows {
            var tuples: [[UInt8]] = []
            var inserted: [PendingWrite] = []
            tuples.reserveCapacity(created.count)
            for w in created {
                if let t = DocumentCopy.tuple(collection: collection, id: w.key.id, document: w.document) {
                    tuples.append(t)
                } else {
                    inserted.append(w)
                }
            }
            created = inserted
            try await db.copyIn(PostgresQuery(unsafeSQL: DocumentCopy.statement), data: DocumentCopy.payload(tuples))
        }
        // One row each (a point UPDATE, a one-document INSERT): the same statements with scalar
        // parameters — no arrays to build here and to take apart with unnest there.
        if created.count == 1, let w = created.first {
            let (value, state) = Self.columns(w)
            let deleted = !w.document.exists
            var insert: PostgresQuery = """
                INSERT INTO documents (collection, id, value, state, deleted, deleted_at, updated_at)
                VALUES (\(collection), \(w.key.idJSON)::jsonb, \(value)::jsonb, \(state)::bytea, \(deleted)::bool, CASE WHEN \(deleted)::bool THEN now() END, now())
                """
            insert.prepared = true
            try await db.enqueue(insert)
            created = []
        }
        if updated.count == 1, let w = updated.first {
            let (value, state) = Self.columns(w)
            let deleted = !w.document.exists
            var upsert: PostgresQuery = """
                INSERT INTO documents AS d (collection, id, value, state, deleted, deleted_at, updated_at)
                VALUES (\(collection), \(w.key.idJSON)::jsonb, \(value)::jsonb, \(state)::bytea, \(deleted)::bool, CASE WHEN \(deleted)::bool THEN now() END, now())
                \(unsafeRaw: Self.upsertConflictClause)
                """
            upsert.prepared = true
            try await db.enqueue(upsert)
            updated = []
        }
        for chunk in stride(from: 0, to: created.count, by: 500) {
            let a = Self.rowArrays(created[chunk..<min(chunk + 500, created.count)])
            var insert: PostgresQuery = """
                INSERT INTO documents (collection, id, value, state, deleted, deleted_at, updated_at)
                SELECT \(collection), i, v, s, x, CASE WHEN x THEN now() END, now()
                FROM unnest(\(a.ids)::jsonb[], \(a.values)::jsonb[], \(a.states)::bytea[], \(a.deleted)::bool[]) AS u(i, v, s, x)
                """
            insert.prepared = true
            try await db.enqueue(insert)
        }
        for chunk in stride(from: 0, to: updated.count, by: 500) {
            let a = Self.rowArrays(updated[chunk..<min(chunk + 500, updated.count)])
            var upsert: PostgresQuery = """
                INSERT INTO documents AS d (collection, id, value, state, deleted, deleted_at, updated_at)
                SELECT \(collection), i, v, s, x, CASE WHEN x THEN now() END, now()
                FROM unnest(\(a.ids)::jsonb[], \(a.values)::jsonb[], \(a.states)::bytea[], \(a.deleted)::bool[]) AS u(i, v, s, x)
                \(unsafeRaw: Self.upsertConflictClause)
                """
            upsert.prepared = true
            try await db.enqueue(upsert)
        }
        changes.reserveCapacity(changes.count + writes.count)
        // Many documents would only churn the lock cache (it is emptied every `lockCacheLimit`
        // entries anyway): drop it instead, which is always correct for a cache.
        let rememberWrites = writes.count < Self.lockCacheLimit / 16
        if !rememberWrites {
            lockedDocuments = [:]
            knownAbsent = []
        }
        for (w, creating) in zip(writes, creates) {
            // A live document created by a server-side write logs no delta: its delta is its whole
            // state, which `documents.state` holds from now on (docs/STORAGE.md, migrations/0006).
            // Sync uploads keep theirs: the live fan-out compares it with the state to spot a
            // peer's own upload.
            let delta = creating && kind == "upsert" && currentOrigin == nil && w.document.exists
                ? nil : (w.encoded?.delta ?? (w.delta ?? w.document.delta(since: VersionVector())).encode())
            changes.append(ChangeRecord(key: w.key, kind: kind, delta: delta, origin: currentOrigin))
            if rememberWrites { remember(w.key, w.document) }
        }
    }

    /// The `documents` columns of some writes as array binds.
    struct RowArrays {
        var ids: PostgresArray<PostgresJSON>, values: PostgresArray<PostgresJSON>
        var states: PostgresArray<PostgresBytea>, deleted: PostgresArray<Bool>
    }

    static func rowArrays(_ part: ArraySlice<PendingWrite>) -> RowArrays {
        var ids: [PostgresJSON?] = [], values: [PostgresJSON?] = [], states: [PostgresBytea?] = [], deleted: [Bool?] = []
        ids.reserveCapacity(part.count); values.reserveCapacity(part.count)
        states.reserveCapacity(part.count); deleted.reserveCapacity(part.count)
        for w in part {
            ids.append(w.key.idJSON)
            let (value, state) = columns(w)
            values.append(value)
            states.append(state)
            deleted.append(!w.document.exists)
        }
        return RowArrays(ids: PostgresArray(ids), values: PostgresArray(values), states: PostgresArray(states), deleted: PostgresArray(deleted))
    }

    /// A write's `value` (NULL for a tombstone) and `state` columns, encoded now unless they were already.
    static func columns(_ w: PendingWrite) -> (PostgresJSON?, PostgresBytea) {
        if let e = w.encoded, let state = e.state { return (e.value, state) }
        return (w.document.materialize().map { PostgresJSON(JSON.string($0)) }, PostgresBytea(w.document.encode()))
    }

    /// Records a collection the first time it is written and gives analysts a view of it
    /// (`analytics."name"`: `_id`, `value`, `updated_at` of its live documents). The FROM item is
    /// a subquery so the view is not automatically updatable: nobody, its owner included, can
    /// write `documents` through it behind the CRDT state (migrations/0009_analyst_role.sql).
    /// Analysts' SELECT on it comes from that migration's default privileges.
    mutating func registerCollection(_ name: String) async throws {
        if registeredCollections.contains(where: { $0.utf8Equals(name) }) || store.knownCollections.withLock({ $0.contains(ExactString(name)) }) { return }
        let inserted = try await db.query("INSERT INTO bigpeer_collections (name) VALUES (\(name)) ON CONFLICT DO NOTHING RETURNING name")
        if !inserted.isEmpty && name != "all_documents" && name.utf8.count <= 63 && !name.contains("\0") {
            let literal = Quote.sqlLiteral(name)
            try await db.enqueue(PostgresQuery(unsafeSQL: """
                CREATE VIEW analytics.\(PostgresQuery.quoteIdentifier(name)) AS
                SELECT _id, value, updated_at FROM (SELECT id #>> '{}' AS _id, value, updated_at FROM documents WHERE collection = \(literal) AND NOT deleted) AS live
                """))
        }
        registeredCollections.append(name)
    }
}
