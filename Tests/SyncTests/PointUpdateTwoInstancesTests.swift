import BigPeerTestSupport
import Testing
import Values
@testable import Store

/// Point UPDATEs by `_id` lock their one document with `id = $2` (`WriteTransaction.lockDocuments`):
/// concurrent writers on two instances must still serialize on the row and merge against its
/// current state — no increment lost, no field of the other writer overwritten.
@Suite struct PointUpdateTwoInstancesTests {
    @Test func concurrentIncrementsFromTwoInstances_areAllCounted() async throws {
        try await withTwoStores { a, b in
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'x', n: 0, m: 0}), ({_id: 'y', n: 0})")
            let perWriter = 25
            let transactions = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for (w, store) in [a, a, b, b].enumerated() {
                    group.addTask {
                        var mine: [Int64] = []
                        for _ in 0..<perWriter {
                            // Two writers per instance: group-committed batches of both shapes
                            // (one statement alone, several locking the same id together).
                            let field = w % 2 == 0 ? "n" : "m"
                            mine.append(try await store.execute("UPDATE cars SET \(field) = \(field) + 1 WHERE _id = :id", arguments: ["id": "x"]).transactionID)
                            _ = try await store.execute("UPDATE cars SET n = n + 1 WHERE _id = :id", arguments: ["id": "y"])
                        }
                        return mine
                    }
                }
                var all: [Int64] = []
                for try await t in group { all += t }
                return all
            }
            #expect(transactions.count == 4 * perWriter)
            let x = try await b.execute("SELECT * FROM cars WHERE _id = 'x'").items
            #expect(x == [["_id": "x", "n": .int(Int64(2 * perWriter)), "m": .int(Int64(2 * perWriter))]])
            let y = try await a.execute("SELECT * FROM cars WHERE _id = 'y'").items
            #expect(y == [["_id": "y", "n": .int(Int64(4 * perWriter))]])
        }
    }

    /// A point UPDATE of an id that has no row (never created, or evicted) changes nothing, and a
    /// tombstone is not resurrected.
    @Test func pointUpdateOfAMissingOrDeletedDocument_writesNothing() async throws {
        try await withTwoStores { a, b in
            _ = try await a.execute("INSERT INTO cars DOCUMENTS ({_id: 'd', n: 1})")
            _ = try await b.execute("DELETE FROM cars WHERE _id = 'd'")
            let missing = try await a.execute("UPDATE cars SET n = 5 WHERE _id = :id", arguments: ["id": "nope"])
            #expect(missing.mutatedDocumentIDs.isEmpty)
            let deleted = try await a.execute("UPDATE cars SET n = 5 WHERE _id = :id", arguments: ["id": "d"])
            #expect(deleted.mutatedDocumentIDs.isEmpty)
            #expect(try await b.execute("SELECT * FROM cars").items.isEmpty)
        }
    }
}
