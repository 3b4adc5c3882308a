import BigPeerTestSupport
import Postgres
import Testing
import Values
@testable import Store

/// A plain INSERT of more than one chunk (`InsertMerge.chunk` documents) evaluates and merges its
/// documents a chunk at a time while earlier chunks are being stored
/// (`WriteTransaction.insertEvaluatingInChunks`). Whatever fails in a later chunk — a bad
/// document, an `_id` repeated from an earlier chunk, an `_id` that exists — must leave nothing
/// of the statement behind, exactly as when the whole statement was evaluated first.
@Suite struct ChunkedInsertEvaluationTests {
    static let count = 2 * InsertMerge.chunk + 500

    static func docs(_ field: String) -> [Value] { (0..<count).map { BulkInsertTests.doc($0, field) } }

    static func nothingWritten(_ store: DocumentStore, _ collection: String) async throws {
        #expect(try await BulkInsertTests.int(store, "SELECT count(*) FROM documents WHERE collection = \(collection)") == 0)
        #expect(try await BulkInsertTests.int(store, "SELECT count(*) FROM change_log WHERE collection = \(collection)") == 0)
    }

    /// Results in statement order: mutated ids (generated ones where a document had no `_id`) and
    /// size warnings numbered by the document's position in the statement, across chunks.
    @Test func mutatedIDsAndWarnings_followStatementOrderAcrossChunks() async throws {
        try await withStore { store, _ in
            var docs = Self.docs("a")
            for i in stride(from: 50, to: Self.count, by: 700) { docs[i] = ["n": .int(Int64(i)), "generated": true] }
            let big = InsertMerge.chunk + 700
            docs[big] = ["_id": .string("doc-\(big)"), "pad": .string(String(repeating: "y", count: 300 * 1024))]
            let (statement, arguments) = BulkInsertTests.statement("ordered", docs)
            let result = try await store.execute(statement, arguments: arguments)
            #expect(result.mutatedDocumentIDs.count == Self.count)
            for (i, id) in result.mutatedDocumentIDs.enumerated() where i % 700 != 50 {
                #expect(id == .string("doc-\(i)"))
            }
            let generated = stride(from: 50, to: Self.count, by: 700).map { result.mutatedDocumentIDs[$0] }
            #expect(Set(generated).count == generated.count && generated.allSatisfy { !($0.stringValue?.hasPrefix("doc-") ?? true) })
            #expect(result.warnings.count == 1 && result.warnings.first?.hasPrefix("document \(big + 1) is ") == true, "\(result.warnings)")
            #expect(try await BulkInsertTests.int(store, "SELECT count(*) FROM documents WHERE collection = 'ordered'") == Int64(Self.count))
            #expect(try await BulkInsertTests.int(store, "SELECT count(*) FROM change_log WHERE txn = \(result.transactionID) AND delta IS NULL") == Int64(Self.count))
            #expect(try await store.items("SELECT * FROM ordered WHERE generated = true ORDER BY n").count == generated.count)
        }
    }

    /// A document that is not an object, in the last chunk: the statement's error, nothing written.
    @Test func badDocumentInALaterChunk_writesNothing() async throws {
        try await withStore { store, _ in
            var docs = Self.docs("a")
            docs[Self.count - 3] = "not an object"
            let (statement, arguments) = BulkInsertTests.statement("bad", docs)
            do {
                _ = try await store.execute(statement, arguments: arguments)
                Issue.record("the INSERT with a string document succeeded")
            } catch let StoreError.invalid(message) {
                #expect(message.contains("INSERT document \(Self.count - 2)"), "\(message)")
            }
            try await Self.nothingWritten(store, "bad")
        }
    }

    /// The same `_id` in two chunks (and, separately, twice in one chunk) is one document, which
    /// the default FAIL policy refuses: a conflict, nothing written.
    @Test func idRepeatedAcrossOrWithinChunks_isAConflict() async throws {
        try await withStore { store, _ in
            for (collection, repeatAt, of) in [("across", Self.count - 10, 10), ("within", InsertMerge.chunk + 20, InsertMerge.chunk + 10)] {
                var docs = Self.docs("a")
                docs[repeatAt] = ["_id": .string("doc-\(of)"), "again": true]
                let (statement, arguments) = BulkInsertTests.statement(collection, docs)
                do {
                    _ = try await store.execute(statement, arguments: arguments)
                    Issue.record("\(collection): the INSERT repeating an _id succeeded")
                } catch let StoreError.conflict(message) {
                    #expect(message.contains("doc-\(of)"), "\(message)")
                }
                try await Self.nothingWritten(store, collection)
            }
            // With DO UPDATE the repeat merges into the first (the statement takes the grouped path).
            var docs = Self.docs("a")
            docs[Self.count - 10] = ["_id": "doc-10", "again": true]
            let (statement, arguments) = BulkInsertTests.statement("merged", docs, conflict: "ON ID CONFLICT DO UPDATE")
            _ = try await store.execute(statement, arguments: arguments)
            let rows = try await BulkInsertTests.rows(store, "merged")
            #expect(rows.count == Self.count - 1 && rows["doc-10"]?.0["a"] == true && rows["doc-10"]?.0["again"] == true)
        }
    }

    /// An `_id` that already exists, in a later chunk: the rerun with lookups reports the conflict;
    /// only the existing document remains.
    @Test func existingIDInALaterChunk_isAConflict() async throws {
        try await withStore { store, _ in
            let existing = Self.count - 100
            _ = try await store.execute("INSERT INTO taken DOCUMENTS ({'_id': 'doc-\(existing)', 'before': true})")
            let (statement, arguments) = BulkInsertTests.statement("taken", Self.docs("a"))
            do {
                _ = try await store.execute(statement, arguments: arguments)
                Issue.record("the INSERT over an existing document succeeded")
            } catch let StoreError.conflict(message) {
                #expect(message.contains("doc-\(existing)"), "\(message)")
            }
            let rows = try await BulkInsertTests.rows(store, "taken")
            #expect(rows.count == 1 && rows["doc-\(existing)"]?.0["before"] == true)
        }
    }
}
