// What the sync protocol (Sources/Sync, docs/PROTOCOL.md) needs from the store: merging uploaded
// CRDT deltas through the group-commit write path, paging a subscription's documents by id,
// fetching full states, and checking whether the change log still reaches back to a checkpoint
// (reading the change log itself: ChangeLogRead.swift).

import CRDT
import DQL
import Postgres
import Synchronization
import SyncProtocol
import Values

/// One uploaded delta for `mergeDeltas`.
public struct MergeItem: Sendable {
    public var collection: String
    public var id: Value
    public var delta: [UInt8]
    public init(collection: String, id: Value, delta: [UInt8]) {
        self.collection = collection
        self.id = id
        self.delta = delta
    }
}

/// A document as initial sync and `want` need it.
public struct StoredDocument: Sendable {
    public var collection: String
    public var id: Value
    public var state: [UInt8]
    public var value: Value?
}

extension DocumentStore {
    /// Why `mergeDeltas` rejects a delta that does not follow the stored version (`deltaGap`):
    /// the sender must send the full state. Also the wire text of that rejection (PROTOCOL.md §4.8).
    public static let deltaGapRejection = UploadRejection.deltaGapMessage

    /// Merges uploaded deltas in one write transaction (group-committed with other writes) and
    /// returns after COMMIT: the transaction number and the entries that were not applied.
    /// `checkpoints` (upstream downloads) are written in the same transaction, unless a delta
    /// was rejected for a gap (the checkpoint would cover a change not held). An entry whose
    /// document does not match `writeRules` (the uploader's) before and after it is rejected
    /// with `writeRuleRejection`; the rest proceed.
    public func mergeDeltas(_ items: [MergeItem], origin: Int64, checkpoints: DownloadCheckpoints? = nil, writeRules: DocumentRules = .none)
        async throws(StoreError) -> (txn: Int64, rejected: [(index: Int, message: String)]) {
        do {
            let job = WriteBatcher.Job(work: .merge(items, origin: origin, checkpoints: checkpoints), nowMillis: Int64(Replica.systemMillis()),
                                       writeRules: writeRules)
            let r = try await batcher.submit(job, store: self)
            return (r.transactionID, r.rejections)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// One page of live documents of a subscription, in `id` order after `after`: at most `limit`
    /// rows from PostgreSQL, cut where the states' running size passes `maxBytes` (the first row
    /// always stays), then filtered by the part of the WHERE clause PostgreSQL could not run.
    /// `nextAfter` is where the next page starts; `txn` is the snapshot the page was read at.
    public func syncPage(_ statement: SelectStatement, arguments: [String: Value], after: Value?, limit: Int, maxBytes: Int)
        async throws(StoreError) -> (rows: [StoredDocument], nextAfter: Value?, txn: Int64, isLast: Bool) {
        let read = try await readSyncPage(statement, arguments: arguments, after: after, limit: limit, maxBytes: maxBytes)
        return (try await read.documents(), read.nextAfter, read.txn, read.isLast)
    }

    /// The database half of `syncPage`: runs the query and reads only where the page ends. The
    /// states are decoded afterwards (`SyncPageRead.documents()`), so a caller can start reading
    /// the next page while it decodes and sends this one.
    public func readSyncPage(_ statement: SelectStatement, arguments: [String: Value], after: Value?, limit: Int, maxBytes: Int)
        async throws(StoreError) -> SyncPageRead {
        do {
            var scan = try await subscriptionScan(statement, arguments: arguments)
            let plan = scan.plan
            var conditions = scan.conditions
            if let after {
                conditions = "(" + conditions + ") AND id > $\(scan.bind(PostgresBind(type: PostgresType.jsonb, text: JSON.string(after))))::jsonb"
            }
            let limitParam = scan.bind(PostgresBind(type: PostgresType.int8, text: String(max(1, limit))))
            let bytesParam = scan.bind(PostgresBind(type: PostgresType.int8, text: String(max(1, maxBytes))))
            let binds = scan.binds
            let sql = """
                SELECT t.n, q.id, q.state, q.value, q.total FROM bigpeer_txn t LEFT JOIN LATERAL (
                  SELECT * FROM (
                    SELECT id, state, value, count(*) OVER () AS total,
                           sum(octet_length(state)) OVER (ORDER BY id) - octet_length(state) AS before
                    FROM (SELECT id, state, \(scan.valueColumn) AS value FROM documents WHERE \(conditions) ORDER BY id LIMIT $\(limitParam)::bigint) p
                  ) s WHERE before < $\(bytesParam)::bigint ORDER BY id
                ) q ON true
                """
            var query = PostgresQuery(unsafeSQL: sql, binds: binds)
            // The text depends only on the subscription's shape (values, `after`, the limits are
            // binds): a pool session parses and plans it once for all pages of all such syncs.
            query.prepared = true
            // Binary columns (BinaryColumns): the states come as their bytes, not as hex text of
            // twice their size that PostgreSQL writes and the server decodes back.
            query.binaryResults = true
            let result = try await pool.query(query)
            let txn = try BinaryColumns.int64(result[0], column: 0)
            // Rows of the page: all but a lone NULL row (no document after `after`).
            let fetched = result.count == 1 && result[0].isNull(1) ? 0 : result.count
            var last: Value? = after
            var total: Int64 = 0
            var stateBytes = 0
            if fetched > 0 {
                let row = result[fetched - 1]
                last = try BinaryColumns.json(row, column: 1)
                total = try BinaryColumns.int64(row, column: 4)
                for i in 0..<fetched { stateBytes += BinaryColumns.byteCount(result[i], column: 2) }
            }
            let isLast = total < Int64(max(1, limit)) && Int64(fetched) == total
            return SyncPageRead(result: result, rowCount: fetched, collection: statement.from.name,
                                filter: plan.residual == nil ? nil : plan.memoryQuery,
                                nextAfter: last, txn: txn, isLast: isLast, stateBytes: stateBytes)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Whether every change after `checkpoint` is still in the change log. Committed transaction
    /// numbers have no gaps, each has at least one change-log row, and pruning only removes the
    /// oldest rows, so the log is complete after `checkpoint` iff `checkpoint >= min(txn) - 1`
    /// (an empty log: iff `checkpoint` is the newest number). A checkpoint above the newest
    /// transaction comes from another database: not reachable.
    public func changeLogReaches(back checkpoint: Int64) async throws(StoreError) -> Bool {
        do {
            let row = try await pool.query("SELECT n, (SELECT min(txn) FROM change_log) FROM bigpeer_txn")[0]
            let newest = try row.decode(0, as: Int64.self)
            guard checkpoint >= 0, checkpoint <= newest else { return false }
            if row.isNull(1) { return checkpoint == newest }
            return checkpoint >= (try row.decode(1, as: Int64.self)) - 1
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Full states and values of these documents (missing ones are left out).
    public func fetchDocuments(_ refs: [(collection: String, id: Value)]) async throws(StoreError) -> [StoredDocument] {
        do {
            var byCollection: [String: [Value]] = [:]
            for r in refs { byCollection[r.collection, default: []].append(r.id) }
            var out: [StoredDocument] = []
            for (collection, ids) in byCollection {
                let array = PostgresArray<PostgresJSON>(ids.map { PostgresJSON(JSON.string($0)) })
                // Answered under the ids as asked: a `want` matches the answer against its own form.
                let asked = AskedIDs(ids)
                for row in try await pool.query("SELECT id, state, value FROM documents WHERE collection = \(collection) AND id = ANY(\(array)::jsonb[])") {
                    // A tombstone's value is SQL NULL: no value (not JSON null, which `isNull ? nil :
                    // …` would give, `Value` being nil-literal-expressible).
                    var value: Value? = nil
                    if !row.isNull(2) { value = try Self.decodeJSON(row, column: 2) }
                    let id = try Self.decodeJSON(row, column: 0), state = try ByteaHex.decode(row, column: 1)
                    for form in asked.forms(of: id) {
                        out.append(StoredDocument(collection: collection, id: form, state: state, value: value))
                    }
                }
            }
            return out
        } catch {
            throw StoreError.from(error)
        }
    }
}

extension WriteTransaction {
    /// Merges uploaded deltas: lock, merge, write state + value, change log with `origin`.
    /// Entries that cannot be applied are rejected one by one; the others are written. With write
    /// rules for a collection, an entry whose document does not match them before or after its
    /// change is rejected too (`DocumentStore.writeRuleRejection`), and the collection's entries
    /// are merged again without it (a later entry of the same document then starts from the state
    /// without it).
    mutating func merge(_ items: [MergeItem], origin: Int64, now: Int64) async throws -> ExecuteResult {
        var rejections: [(index: Int, message: String)] = []
        var order: [String] = []
        var byCollection: [String: [Int]] = [:]
        for (i, item) in items.enumerated() {
            if byCollection[item.collection] == nil { order.append(item.collection) }
            byCollection[item.collection, default: []].append(i)
        }
        var mutated: [Value] = []
        for collection in order {
            let indexes = byCollection[collection] ?? []
            var seen = Set<Value>(), ids: [Value] = []
            for i in indexes where seen.insert(items[i].id).inserted { ids.append(items[i].id) }
            let locked = try await lockDocuments(collection, ids)
            let ruled = writeRules.condition(for: collection) != nil
            var merged = mergeUploads(items, indexes, into: locked, skipping: [], keepValues: ruled)
            if ruled {
                // Without a refused entry, a later one of the same document starts from another
                // state, which may be refused in turn: check again, a few rounds at most; then
                // every entry of a document with a refused one is refused (the other documents'
                // entries do not depend on them, and were allowed).
                var refused = Set<Int>()
                for round in 1... {
                    let denied = try await refusedByWriteRules(merged.values, collection: collection, now: now)
                    if denied.isEmpty { break }
                    refused.formUnion(denied)
                    if round == Self.maxWriteRuleRounds {
                        let touched = Set(refused.map { items[$0].id })
                        refused.formUnion(indexes.filter { touched.contains(items[$0].id) })
                    }
                    merged = mergeUploads(items, indexes, into: locked, skipping: refused, keepValues: true)
                    if round == Self.maxWriteRuleRounds { break }
                }
                rejections += refused.map { ($0, DocumentStore.writeRuleRejection(collection)) }
            }
            rejections += merged.rejections
            var upserts: [PendingWrite] = [], deletes: [PendingWrite] = []
            for id in ids {
                guard let doc = merged.docs[id], let base = merged.before[id] else { continue }
                let delta = doc.delta(since: base)
                if delta.isEmpty { continue }
                let w = PendingWrite(key: DocumentKey(collection: collection, id: id), document: doc, delta: delta)
                if doc.exists { upserts.append(w) } else { deletes.append(w) }
                mutated.append(id)
            }
            currentOrigin = origin
            defer { currentOrigin = nil }
            try await write(upserts, kind: "upsert")
            try await write(deletes, kind: "delete")
        }
        var result = ExecuteResult(transactionID: 0, queryType: "sync", mutatedDocumentIDs: mutated)
        result.rejections = rejections.sorted { $0.index < $1.index }
        return result
    }

    /// Rounds of write-rule checks of one collection of an upload (see `merge`).
    static let maxWriteRuleRounds = 3

    /// What merging one collection's uploaded entries into its locked documents gave.
    struct MergedUploads {
        var docs: [Value: Document]
        /// Each merged document's version before the upload.
        var before: [Value: VersionVector] = [:]
        var rejections: [(index: Int, message: String)] = []
        /// With `keepValues`: per applied entry, its document's value before and after it (nil: none, deleted).
        var values: [WriteRuleCheck] = []
    }

    /// Merges the entries at `indexes` (but those in `skipping`) into `locked`, in order.
    func mergeUploads(_ items: [MergeItem], _ indexes: [Int], into locked: [Value: Document], skipping: Set<Int>,
                      keepValues: Bool) -> MergedUploads {
        var out = MergedUploads(docs: locked)
        for i in indexes where !skipping.contains(i) {
            let item = items[i]
            do {
                let delta = try Delta.decode(item.delta)
                var doc = try out.docs[item.id] ?? Document(id: item.id)
                if out.before[item.id] == nil { out.before[item.id] = doc.versionVector }
                let valueBefore = keepValues ? doc.materialize() : nil
                _ = try doc.merge(delta)
                let value = doc.materialize()
                if let value, JSON.serializedCount(value) > documentLimitBytes {
                    throw StoreError.tooLarge("the document would be larger than \(documentLimitBytes) bytes")
                }
                store.replica.withLock { $0.observe(delta) }
                out.docs[item.id] = doc
                if keepValues { out.values.append(WriteRuleCheck(index: i, before: valueBefore, after: value)) }
            } catch CRDTError.deltaGap {
                out.rejections.append((i, DocumentStore.deltaGapRejection))
            } catch {
                out.rejections.append((i, "\(StoreError.from(error))"))
            }
        }
        return out
    }
}
