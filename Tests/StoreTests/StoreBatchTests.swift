import DQL
import Testing
import Values
@testable import Store

@Suite struct StoreBatchTests {
    @Test func batchCommitsAllUnderOneTransactionNumber() async throws {
        try await withStore { store, _ in
            let r = try await store.executeBatch([
                (try DQL.parse("INSERT INTO a DOCUMENTS ({'_id': '1', 'v': 1})"), [:]),
                (try DQL.parse("INSERT INTO b DOCUMENTS (:d)"), ["d": ["_id": "2"]]),
                (try DQL.parse("UPDATE a SET v = 2 WHERE _id = '1'"), [:]),
            ])
            #expect(r.map(\.transactionID) == [1, 1, 1])
            #expect(r.map(\.mutatedDocumentIDs) == [["1"], ["2"], ["1"]])
            #expect(try await store.items("SELECT v FROM a") == [["v": 2]])
            #expect(try await store.currentTransaction() == 1)
        }
    }

    @Test func aFailingStatementRollsBackTheWholeBatch() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO a DOCUMENTS ({'_id': '1'})")
            do {
                _ = try await store.executeBatch([
                    (try DQL.parse("INSERT INTO a DOCUMENTS ({'_id': '2'})"), [:]),
                    (try DQL.parse("DELETE FROM a WHERE _id = '1'"), [:]),
                    (try DQL.parse("INSERT INTO a DOCUMENTS ({'_id': '2'})"), [:]),  // conflict: FAIL
                ])
                Issue.record("the batch should have failed")
            } catch let error as StoreBatchError {
                #expect(error.index == 2)
                #expect(StoreErrorCase(error.error) == .conflict)
            }
            #expect(try await store.items("SELECT _id FROM a") == [["_id": "1"]])
            #expect(try await store.currentTransaction() == 1)
            await #expect(throws: StoreBatchError.self) {
                _ = try await store.executeBatch([(try DQL.parse("SELECT * FROM a"), [:])])
            }
            #expect(try await store.executeBatch([]).isEmpty)
        }
    }
}
