import BigPeerTestSupport
import CRDT
import Postgres
import Testing
import Values
@testable import Store

/// Bulk INSERTs: creations go to PostgreSQL by binary COPY (`DocumentCopy`) and log no delta;
/// existing documents are merged and upserted as before (docs/STORAGE.md "Write path").
@Suite struct BulkInsertTests {
    static func statement(_ collection: String, _ docs: [Value], conflict: String = "") -> (String, [String: Value]) {
        var placeholders: [String] = []
        var arguments: [String: Value] = [:]
        for (i, d) in docs.enumerated() {
            placeholders.append("(:d\(i))")
            arguments["d\(i)"] = d
        }
        return ("INSERT INTO \(collection) DOCUMENTS \(placeholders.joined(separator: ", ")) \(conflict)", arguments)
    }

    static func doc(_ i: Int, _ field: String) -> Value {
        ["_id": .string("doc-\(i)"), "n": .int(Int64(i)), field: true, "nested": ["k": .string("é\"\\\n\(i)")]]
    }

    static func int(_ store: DocumentStore, _ sql: PostgresQuery) async throws -> Int64 {
        try await store.pool.query(sql)[0].decode(0, as: Int64.self)
    }

    /// Rows of a collection: id text -> (value, state, deleted, deleted_at is null, updated_at is set).
    static func rows(_ store: DocumentStore, _ collection: String) async throws -> [String: (Value, Document, Bool, Bool, Bool)] {
        var out: [String: (Value, Document, Bool, Bool, Bool)] = [:]
        for row in try await store.pool.query("""
            SELECT id #>> '{}', value, state, deleted, deleted_at IS NULL, updated_at IS NOT NULL FROM documents WHERE collection = \(collection)
            """) {
            out[try row.decode(0, as: String.self)] = (
                try DocumentStore.decodeJSON(row, column: 1), try Document.decode(try ByteaHex.decode(row, column: 2)),
                try row.decode(3, as: Bool.self), try row.decode(4, as: Bool.self), try row.decode(5, as: Bool.self))
        }
        return out
    }

    /// The COPY path stores exactly what the INSERT path stores: same value, a state that
    /// materializes to it, a live row with the column defaults, and a change-log row per document
    /// with no delta (a creation's delta is its state).
    @Test func creationsByCopy_storeWhatSmallInsertsStore() async throws {
        try await withStore { store, _ in
            let docs = (0..<300).map { Self.doc($0, "a") }
            let (bulk, bulkArguments) = Self.statement("bulk", docs)
            let t = try await store.execute(bulk, arguments: bulkArguments)
            #expect(t.mutatedDocumentIDs.count == 300)
            for part in stride(from: 0, to: 300, by: 30) {  // below DocumentCopy.minimumRows: plain INSERTs
                let (small, smallArguments) = Self.statement("small", Array(docs[part..<part + 30]))
                _ = try await store.execute(small, arguments: smallArguments)
            }
            let copied = try await Self.rows(store, "bulk"), inserted = try await Self.rows(store, "small")
            #expect(copied.count == 300 && inserted.count == 300)
            for (id, c) in copied {
                guard let i = inserted[id] else { Issue.record("\(id) missing from the INSERT path"); continue }
                #expect(c.0 == i.0)
                #expect(c.1.materialize() == c.0)
                #expect(!c.2 && c.3 && c.4)
            }
            #expect(copied["doc-7"]?.0 == Self.doc(7, "a"))
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID) AND kind = 'upsert' AND delta IS NULL") == 300)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE collection = 'small' AND delta IS NOT NULL") == 0)
            // Readable through DQL and the analytics view like any other document.
            #expect(try await store.items("SELECT * FROM bulk WHERE _id = 'doc-42'") == [Self.doc(42, "a")])
            #expect(try await Self.int(store, "SELECT count(*) FROM analytics.bulk") == 300)
        }
    }

    /// Existing ids in a bulk INSERT merge into their stored state (DO UPDATE keeps the fields
    /// they had), new ids are created; only the merged ones log a delta.
    @Test func existingIDsMerge_newIDsAreCreated() async throws {
        try await withStore { store, _ in
            let (first, firstArguments) = Self.statement("mix", (0..<100).map { Self.doc($0 * 3, "a") })
            _ = try await store.execute(first, arguments: firstArguments)
            let (second, secondArguments) = Self.statement("mix", (0..<300).map { Self.doc($0, "b") }, conflict: "ON ID CONFLICT DO UPDATE")
            let t = try await store.execute(second, arguments: secondArguments)
            #expect(t.mutatedDocumentIDs.count == 300)
            let rows = try await Self.rows(store, "mix")
            #expect(rows.count == 300)
            for i in 0..<300 {
                guard let r = rows["doc-\(i)"] else { Issue.record("doc-\(i) missing"); continue }
                #expect(r.0["b"] == true)
                #expect(r.0["a"] == (i % 3 == 0 ? true : nil), "doc-\(i)")
                #expect(r.1.materialize() == r.0)
            }
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID) AND delta IS NOT NULL") == 100)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID) AND delta IS NULL") == 200)
            // DO NOTHING leaves existing documents alone and still creates the new ones.
            let (third, thirdArguments) = Self.statement("mix", (250..<400).map { Self.doc($0, "c") }, conflict: "ON ID CONFLICT DO NOTHING")
            let n = try await store.execute(third, arguments: thirdArguments)
            #expect(n.mutatedDocumentIDs.count == 100)
            let after = try await Self.rows(store, "mix")
            #expect(after.count == 400 && after["doc-260"]?.0["c"] == nil && after["doc-360"]?.0["c"] == true)
        }
    }

    /// The same `_id` twice in one bulk statement is one document: with DO UPDATE it holds both
    /// copies' fields (one COPY row); under the default FAIL the statement writes nothing.
    @Test func duplicateIDsInsideOneStatement() async throws {
        try await withStore { store, _ in
            var docs = (0..<200).map { Self.doc($0, "a") }
            docs.append(["_id": "doc-5", "second": true])
            let (update, updateArguments) = Self.statement("dup", docs, conflict: "ON ID CONFLICT DO UPDATE")
            let t = try await store.execute(update, arguments: updateArguments)
            let rows = try await Self.rows(store, "dup")
            #expect(rows.count == 200)
            #expect(rows["doc-5"]?.0["a"] == true && rows["doc-5"]?.0["second"] == true)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID)") == 200)

            let (fail, failArguments) = Self.statement("dup2", docs)
            await #expect(throws: StoreError.self) { _ = try await store.execute(fail, arguments: failArguments) }
            #expect(try await Self.int(store, "SELECT count(*) FROM documents WHERE collection = 'dup2'") == 0)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE collection = 'dup2'") == 0)
        }
    }

    /// Another writer creates one of the bulk's new ids after the bulk found it absent: the COPY
    /// waits on that row's index entry, fails with 23505 once it commits, and the whole
    /// transaction reruns and merges into the row (nothing of the first attempt survives).
    @Test func creationRacingTheCopy_isRerunAndMerged() async throws {
        try await withStore { store, db in
            // A real document's state and value to plant, made by the store in another collection.
            _ = try await store.execute("INSERT INTO seed DOCUMENTS ({'_id': 'doc-150', 'planted': true})")
            let seed = try await store.pool.query("SELECT value, state FROM documents WHERE collection = 'seed'")[0]
            let value = try DocumentStore.decodeJSON(seed, column: 0)
            let state = try ByteaHex.decode(seed, column: 1)
            let other = db.makePool()
            let (bulk, bulkArguments) = Self.statement("race", (0..<300).map { Self.doc($0, "bulk") }, conflict: "ON ID CONFLICT DO UPDATE")
            try await other.withConnection { conn in
                _ = try await conn.query("BEGIN")
                _ = try await conn.query("""
                    INSERT INTO documents (collection, id, value, state) VALUES ('race', '"doc-150"', \(PostgresJSON(JSON.string(value))), \(PostgresBytea(state)))
                    """)
                async let result = store.execute(bulk, arguments: bulkArguments)
                // Commit only once the bulk's COPY waits for our uncommitted row.
                #expect(try await eventually {
                    try await Self.int(store, """
                        SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'COPY documents%'
                        """) > 0
                })
                _ = try await conn.query("COMMIT")
                #expect(try await result.mutatedDocumentIDs.count == 300)
            }
            let rows = try await Self.rows(store, "race")
            #expect(rows.count == 300)
            #expect(rows["doc-150"]?.0["planted"] == true && rows["doc-150"]?.0["bulk"] == true)
            #expect(rows.values.allSatisfy { $0.0["bulk"] == true })
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE collection = 'race'") == 300)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE collection = 'race' AND delta IS NOT NULL") == 1)
        }
    }

    /// A plain bulk INSERT (no ON ID CONFLICT) creates without looking its ids up first; when one
    /// of them exists after all, the COPY's unique violation reruns the transaction with lookups,
    /// which reports the conflict and writes nothing.
    @Test func plainInsertOverALiveDocument_failsWholeAfterRerun() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO plain DOCUMENTS ({'_id': 'doc-150', 'before': true})")
            let (bulk, bulkArguments) = Self.statement("plain", (0..<200).map { Self.doc($0, "bulk") })
            do {
                _ = try await store.execute(bulk, arguments: bulkArguments)
                Issue.record("the INSERT over an existing document succeeded")
            } catch let StoreError.conflict(message) {
                #expect(message.contains("doc-150"), "\(message)")
            }
            let rows = try await Self.rows(store, "plain")
            #expect(rows.count == 1 && rows["doc-150"]?.0["before"] == true && rows["doc-150"]?.0["bulk"] == nil)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE collection = 'plain'") == 1)
        }
    }

    /// A deleted document does not exist for INSERT: a plain bulk INSERT naming it trips over its
    /// tombstone row on the first attempt and, rerun with lookups, merges into the tombstone
    /// (a delta in the change log, not a creation) while creating the others.
    @Test func plainInsertOverATombstone_mergesIntoIt() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO tomb DOCUMENTS ({'_id': 'doc-120', 'old': true})")
            _ = try await store.execute("DELETE FROM tomb WHERE _id = 'doc-120'")
            let (bulk, bulkArguments) = Self.statement("tomb", (0..<200).map { Self.doc($0, "bulk") })
            let t = try await store.execute(bulk, arguments: bulkArguments)
            #expect(t.mutatedDocumentIDs.count == 200)
            let rows = try await Self.rows(store, "tomb")
            #expect(rows.count == 200 && rows.values.allSatisfy { !$0.2 && $0.0["bulk"] == true && $0.0["old"] == nil })
            #expect(rows["doc-120"]?.1.materialize() == Self.doc(120, "bulk"))
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID) AND delta IS NULL") == 199)
            #expect(try await Self.int(store, "SELECT count(*) FROM change_log WHERE txn = \(t.transactionID) AND delta IS NOT NULL AND id = '\"doc-120\"'") == 1)
        }
    }

    /// `DocumentCopy`'s framing, byte for byte (PostgreSQL docs, COPY "Binary Format").
    @Test func copyTupleFraming() throws {
        var doc = try Document(id: "x")
        var replica = Replica(site: SiteID(7))
        _ = try doc.insertInitial(["_id": "x", "a": 1], types: TypeDeclarations(strict: true, declared: [:]), replica: &replica)
        guard let tuple = DocumentCopy.tuple(collection: "c", id: "x", document: doc) else { Issue.record("no tuple"); return }
        let state = doc.encode()
        let value = JSON.serialize(["_id": "x", "a": 1])
        let expected: [UInt8] = [0, 4, 0, 0, 0, 1, UInt8(ascii: "c"), 0, 0, 0, 4, 1] + Array(#""x""#.utf8)
            + [0, 0, 0, UInt8(value.count + 1), 1] + value + [0, 0, 0, UInt8(state.count)] + state
        #expect(tuple == expected)
        let payload = DocumentCopy.payload([tuple])
        #expect(Array(payload.prefix(19)) == Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0] + [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(Array(payload.suffix(2)) == [0xFF, 0xFF])
        #expect(payload.count == 19 + tuple.count + 2)
    }

    /// `ChangeLogCopy` rows as PostgreSQL reads them back: every column, NULLs, the patched
    /// transaction number, and pieces that split where `pieceBytes` says.
    @Test func changeLogCopyRoundTripsThroughPostgreSQL() async throws {
        try await withStore { store, _ in
            let changes = (0..<2500).map { i in
                WriteTransaction.ChangeRecord(
                    key: DocumentKey(collection: i % 2 == 0 ? "cars" : "ünïcode", id: i % 7 == 0 ? ["vin": .int(Int64(i))] : .string("c\(i)")),
                    kind: ["upsert", "delete", "evict"][i % 3], delta: i % 3 == 2 ? nil : Array(repeating: UInt8(i % 251), count: (i * 37) % 9000),
                    origin: i % 4 == 0 ? Int64(-i) : nil)
            }
            var pieces: [ChangeLogCopy] = []
            var next = 0
            while next < changes.count {
                var piece = ChangeLogCopy(changes, from: next)
                #expect(piece.end > next)
                next = piece.end
                piece.setTransaction(0x0102_0304_0506_0708)
                pieces.append(piece)
            }
            #expect(pieces.count > 1)
            try await store.pool.withConnection { conn in
                for piece in pieces { _ = try await conn.copyIn(PostgresQuery(unsafeSQL: ChangeLogCopy.statement), data: piece.payload) }
            }
            let rows = try await store.pool.query("SELECT txn, seq, collection, id, kind, delta, origin FROM change_log ORDER BY seq")
            #expect(rows.count == changes.count)
            for (row, (i, c)) in zip(rows, changes.enumerated()) {
                #expect(try row.decode(0, as: Int64.self) == 0x0102_0304_0506_0708)
                #expect(try row.decode(1, as: Int32.self) == Int32(i))
                #expect(try row.decode(2, as: String.self) == c.key.collection)
                #expect(try DocumentStore.decodeJSON(row, column: 3) == c.key.id)
                #expect(try row.decode(4, as: String.self) == c.kind)
                #expect((row.isNull(5) ? nil : try ByteaHex.decode(row, column: 5)) == c.delta)
                #expect((row.isNull(6) ? nil : try row.decode(6, as: Int64.self)) == c.origin)
            }
        }
    }
}
