import BigPeerTestSupport
import Postgres
import TestRandomness
import Testing
import Values
@testable import Store

/// Creating documents with given `_id`s: in bulk (no per-key entry in PostgreSQL's shared lock
/// table, which holds only max_locks_per_transaction × max_connections locks), and by several
/// writers at once on overlapping ids (a plain INSERT of an id found absent fails when another
/// writer created it meanwhile, and the transaction is rerun: docs/STORAGE.md "Write path").
@Suite struct DocumentCreationTests {
    static func bulkStatement(_ collection: String, ids: some Sequence<Int>, field: String) -> (String, [String: Value]) {
        var placeholders: [String] = []
        var arguments: [String: Value] = [:]
        for i in ids {
            placeholders.append("(:d\(i))")
            arguments["d\(i)"] = ["_id": .string("doc-\(i)"), "n": .int(Int64(i)), field: true]
        }
        return ("INSERT INTO \(collection) DOCUMENTS \(placeholders.joined(separator: ", ")) ON ID CONFLICT DO UPDATE", arguments)
    }

    static func count(_ store: DocumentStore, _ sql: PostgresQuery) async throws -> Int64 {
        let rows = try await store.pool.query(sql)
        return try rows[0].decode(0, as: Int64.self)
    }

    /// Enough new documents with given ids in one statement to overflow PostgreSQL's shared lock
    /// table had each key taken a lock-table entry (it did: a transaction-scoped advisory lock, and
    /// the statement failed with "53200 out of shared memory"), at least 20,000; then the same
    /// documents again (now every one is an existing row, locked with FOR UPDATE).
    @Test func bulkInsertOfGivenIDsBeyondTheLockTable() async throws {
        try await withStore { store, _ in
            // The lock table's size: max_locks_per_transaction × (every backend that can hold locks).
            let capacity = try await Self.count(store, """
                SELECT current_setting('max_locks_per_transaction')::int8 * (current_setting('max_connections')::int8
                  + current_setting('autovacuum_max_workers')::int8 + current_setting('max_worker_processes')::int8
                  + current_setting('max_wal_senders')::int8 + current_setting('max_prepared_transactions')::int8 + 1)
                """)
            // (It can grow into spare shared memory: at 400 connections the limit measured ~1.6 × that.)
            let n = min(max(20_000, Int(capacity) * 2), 200_000)
            let (first, firstArguments) = Self.bulkStatement("bulk", ids: 0..<n, field: "first")
            let created = try await store.execute(first, arguments: firstArguments)
            #expect(created.mutatedDocumentIDs.count == n)
            let (second, secondArguments) = Self.bulkStatement("bulk", ids: 0..<n, field: "second")
            let updated = try await store.execute(second, arguments: secondArguments)
            #expect(updated.mutatedDocumentIDs.count == n)
            #expect(updated.transactionID == created.transactionID + 1)
            #expect(try await Self.count(store, "SELECT count(*) FROM documents WHERE collection = 'bulk'") == Int64(n))
            #expect(try await Self.count(store, """
                SELECT count(*) FROM documents WHERE collection = 'bulk' AND value->>'first' = 'true' AND value->>'second' = 'true'
                """) == Int64(n))
            #expect(try await Self.count(store, "SELECT count(*) FROM change_log WHERE collection = 'bulk'") == Int64(2 * n))
        }
    }

    /// Two instances, four writers each, create overlapping ranges of new ids in multi-document
    /// statements, in shuffled order (which also provokes deadlocks between the INSERTs). Every
    /// writer's field must survive on every document of its range.
    @Test func concurrentCreatorsOfOverlappingIDSets_loseNoAcknowledgedField() async throws {
        try await withStore { a, db in
            let b = try await DocumentStore.open(pool: db.makePool())
            let writers = 8, span = 60, stride = 20, perStatement = 12
            var rng = SeededRandom(seed: 0x0C12_EA7E)
            var plans: [(store: DocumentStore, field: String, statements: [[Int]])] = []
            for w in 0..<writers {
                var ids = Array(w * stride..<(w * stride + span))
                ids.shuffle(using: &rng)
                let statements = Swift.stride(from: 0, to: ids.count, by: perStatement).map { Array(ids[$0..<min($0 + perStatement, ids.count)]) }
                plans.append((w % 2 == 0 ? a : b, "w\(w)", statements))
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for plan in plans {
                    for ids in plan.statements {
                        let (text, arguments) = Self.bulkStatement("race", ids: ids, field: plan.field)
                        group.addTask { _ = try await plan.store.execute(text, arguments: arguments) }
                    }
                }
                try await group.waitForAll()
            }
            let items = try await a.items("SELECT * FROM race")
            let total = (writers - 1) * stride + span
            #expect(items.count == total)
            var lost: [String] = []
            for item in items {
                guard case .int(let i)? = item["n"] else { lost.append("no n in \(item)"); continue }
                for w in 0..<writers where (w * stride..<(w * stride + span)).contains(Int(i)) {
                    if item["w\(w)"] != true { lost.append("doc-\(i) lost w\(w)") }
                }
            }
            #expect(lost.isEmpty, "acknowledged fields lost: \(lost.prefix(20))")
        }
    }

    /// A bulk INSERT is written in chunks while later chunks are still being merged; one that
    /// fails midway (here the same new `_id` twice under the default ON ID CONFLICT FAIL, found
    /// only when the second copy is merged) must leave nothing behind, and statements
    /// group-committed with it must still succeed.
    @Test func bulkInsertFailingAfterItsFirstChunk_writesNothing_andSparesItsBatch() async throws {
        try await withStore { store, _ in
            var placeholders: [String] = []
            var arguments: [String: Value] = [:]
            for i in 0..<2500 {
                placeholders.append("(:d\(i))")
                arguments["d\(i)"] = ["_id": .string(i == 2200 ? "doc-2100" : "doc-\(i)"), "n": .int(Int64(i))]
            }
            let bulk = "INSERT INTO half DOCUMENTS \(placeholders.joined(separator: ", "))"
            let failure = await #expect(throws: StoreError.self) { _ = try await store.execute(bulk, arguments: arguments) }
            if case .conflict? = failure {} else { Issue.record("expected a conflict, got \(String(describing: failure))") }
            #expect(try await Self.count(store, "SELECT count(*) FROM documents WHERE collection = 'half'") == 0)
            #expect(try await Self.count(store, "SELECT count(*) FROM change_log WHERE collection = 'half'") == 0)

            let bulkArguments = arguments
            let outcomes = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask { (try? await store.execute(bulk, arguments: bulkArguments)) != nil }
                for i in 0..<20 {
                    group.addTask {
                        _ = try await store.execute("INSERT INTO half DOCUMENTS (:d)", arguments: ["d": ["_id": .string("small-\(i)")]])
                        return true
                    }
                }
                var succeeded = 0
                for try await ok in group where ok { succeeded += 1 }
                return succeeded
            }
            #expect(outcomes == 20)
            #expect(try await Self.count(store, "SELECT count(*) FROM documents WHERE collection = 'half'") == 20)
        }
    }

    /// A change log larger than what `finish` encodes before locking the counter (8 MiB): the
    /// rest is encoded after, and every row still carries the one transaction number, in order.
    /// (Creations log no delta, so the big change log is an update of 9000 documents.)
    @Test func changeLogBeyondThePrebuiltPart_isCompleteAndInOrder() async throws {
        try await withStore { store, _ in
            let pad = Value.string(String(repeating: "p", count: 1200))
            var placeholders: [String] = []
            var arguments: [String: Value] = [:]
            for i in 0..<9000 {
                placeholders.append("(:d\(i))")
                arguments["d\(i)"] = ["_id": .string("doc-\(i)"), "pad": pad]
            }
            let statement = "INSERT INTO big DOCUMENTS \(placeholders.joined(separator: ", ")) ON ID CONFLICT DO UPDATE"
            let created = try await store.execute(statement, arguments: arguments)
            #expect(try await Self.count(store, "SELECT count(*) FROM change_log WHERE txn = \(created.transactionID) AND delta IS NULL") == 9000)
            let result = try await store.execute(statement, arguments: arguments)
            #expect(result.mutatedDocumentIDs.count == 9000)
            #expect(try await Self.count(store, "SELECT sum(octet_length(delta))::int8 FROM change_log WHERE txn = \(result.transactionID)") > 9 << 20)
            #expect(try await Self.count(store, """
                SELECT count(*) FROM change_log WHERE txn = \(result.transactionID) AND collection = 'big' AND delta IS NOT NULL
                """) == 9000)
            #expect(try await Self.count(store, "SELECT max(seq) - min(seq) + 1 FROM change_log WHERE txn = \(result.transactionID)") == 9000)
            #expect(try await Self.count(store, "SELECT n FROM bigpeer_txn") == result.transactionID)
        }
    }

    /// Only a unique violation on documents' primary key reruns a write transaction.
    @Test func onlyAUniqueViolationOnTheDocumentsKeyIsAConcurrentCreation() {
        func error(_ state: String, _ constraint: String?) -> PostgresError {
            var e = PostgresServerError(sqlState: state, message: "m")
            e.constraint = constraint
            return .server(e)
        }
        #expect(error("23505", "documents_pkey").isConcurrentDocumentCreation)
        #expect(!error("23505", "bigpeer_collections_pkey").isConcurrentDocumentCreation)
        #expect(!error("23505", nil).isConcurrentDocumentCreation)
        #expect(!error("40001", "documents_pkey").isConcurrentDocumentCreation)
        #expect(!PostgresError.shutDown.isConcurrentDocumentCreation)
    }
}
