import BigPeerTestSupport
import CRDT
import DQL
import Postgres
import Synchronization
import Testing
import Values
@testable import Store

/// The write path's round-trip savings (held statements, the per-transaction lock cache, batch
/// prefetch of INSERT targets, generated ids not looked up) must not change any result.
@Suite struct WriteRoundTripTests {
    /// One transaction, statements in order, the same document again and again: every statement
    /// must see what the previous ones did (the lock cache is kept exactly in step).
    @Test func oneTransaction_seesItsOwnWritesEvictionsAndTombstones() async throws {
        try await withStore { store, _ in
            func st(_ text: String) throws -> (statement: Statement, arguments: [String: Value]) { (try DQL.parse(text), [:]) }
            let results = try await store.executeBatch([
                try st("INSERT INTO c DOCUMENTS ({_id: 'e', v: 1})"),
                try st("INSERT INTO c DOCUMENTS ({_id: 'e', v: 9}) ON ID CONFLICT DO NOTHING"),
                try st("EVICT FROM c WHERE _id = 'e'"),
                try st("INSERT INTO c DOCUMENTS ({_id: 'e', v: 2})"),  // no conflict: evicted
                try st("UPDATE c SET v = 3 WHERE _id = 'e'"),
                try st("DELETE FROM c WHERE _id = 'e'"),
                try st("UPDATE c SET v = 5 WHERE _id = 'e'"),  // deleted: matches nothing
                try st("INSERT INTO c DOCUMENTS ({_id: 'e', w: 4})"),  // re-created after the tombstone
            ])
            #expect(results.map(\.mutatedDocumentIDs) == [["e"], [], ["e"], ["e"], ["e"], ["e"], [], ["e"]])
            #expect(Set(results.map(\.transactionID)).count == 1)
            #expect(try await store.items("SELECT * FROM c") == [["_id": "e", "w": 4]])
            // The change log holds every change of that one transaction, in statement order.
            let kinds = try await store.pool.query("SELECT kind FROM change_log WHERE collection = 'c' ORDER BY seq")
                .map { try $0.decode(0, as: String.self) }
            #expect(kinds == ["upsert", "evict", "upsert", "upsert", "delete", "upsert"])
        }
    }

    /// A group-committed batch (`runInTransaction`, as `WriteBatcher` runs it) evaluates each small
    /// INSERT's documents once: the look-ahead for the ids to lock (`prefetchInsertTargets`)
    /// hands its plan to the statement, which evaluated them all a second time before. Results
    /// are those of the statements run alone; a statement after an ALTER SYSTEM that changed the
    /// strict mode is evaluated again under the new mode.
    @Test func batchOfSmallInserts_evaluatesEachDocumentOnce() async throws {
        try await withStore { store, _ in
            let now = Int64(Replica.systemMillis())
            func job(_ text: String) throws -> WriteBatcher.Job { WriteBatcher.Job(work: .statement(try DQL.parse(text), [:]), nowMillis: now) }
            func evaluated() -> Int { store.insertDocumentsEvaluated.load(ordering: .relaxed) }
            let before = evaluated()
            let (results, _) = try await store.runInTransaction([
                try job("INSERT INTO c DOCUMENTS ({_id: 'a', v: 1}), ({_id: 'b', v: 2}), ({v: 3})"),
                try job("INSERT INTO c DOCUMENTS ({_id: 'a', v: 9}) ON ID CONFLICT DO UPDATE"),
                try job("UPDATE c SET w = 1 WHERE _id = 'b'"),
            ])
            #expect(evaluated() - before == 4, "each INSERT document evaluated once")
            #expect(try results.map { try $0.get().mutatedDocumentIDs.count } == [3, 1, 1])
            #expect(try await store.items("SELECT * FROM c WHERE _id = 'a' OR _id = 'b' ORDER BY _id")
                    == [["_id": "a", "v": 9], ["_id": "b", "v": 2, "w": 1]])

            // Non-strict from the ALTER SYSTEM on: the INSERT after it makes `o` a MAP (the
            // look-ahead ran before it, in strict mode, so its plan is not used).
            let strict = evaluated()
            let (more, _) = try await store.runInTransaction([
                try job("ALTER SYSTEM SET DQL_STRICT_MODE = false"),
                try job("INSERT INTO m DOCUMENTS ({_id: 'x', o: {a: 1}})"),
            ])
            #expect(more.allSatisfy { if case .success = $0 { true } else { false } })
            #expect(evaluated() - strict == 2, "evaluated again under the new strict mode")
            _ = try await store.execute("UPDATE m SET o.b = 2 WHERE _id = 'x'")
            #expect(try await store.items("SELECT o FROM m") == [["o": ["a": 1, "b": 2]]])
        }
    }

    /// Many concurrent statements group-committed together, several naming the same ids (batch
    /// prefetch + cache) and several with generated ids (not looked up): each id is inserted once.
    @Test func concurrentInsertsOfTheSameIds_mutateEachIdOnce() async throws {
        try await withStore { store, _ in
            let mutated = try await withThrowingTaskGroup(of: [Value].self) { group in
                for i in 0..<60 {
                    group.addTask {
                        if i % 3 == 0 { return try await store.execute("INSERT INTO p DOCUMENTS ({n: \(i)})").mutatedDocumentIDs }
                        return try await store.execute("INSERT INTO p DOCUMENTS (:d) ON ID CONFLICT DO NOTHING",
                                                       arguments: ["d": ["_id": .string("p\(i % 10)"), "n": .int(Int64(i))]]).mutatedDocumentIDs
                    }
                }
                var all: [Value] = []
                for try await ids in group { all += ids }
                return all
            }
            let supplied = mutated.filter { if case .string(let s) = $0 { s.hasPrefix("p") && s.count == 2 } else { false } }
            #expect(supplied.count == 10 && Set(supplied).count == 10)
            #expect(Set(mutated).count == 30)  // 10 supplied + 20 generated, all distinct
            #expect(try await store.items("SELECT COUNT(*) AS n FROM p") == [["n": 30]])
            // Counters under the same batching: every increment counts exactly once.
            _ = try await store.execute("INSERT INTO COLLECTION k (n COUNTER) DOCUMENTS ({_id: 'k', n: 0})")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<40 {
                    group.addTask { _ = try await store.execute("UPDATE COLLECTION k (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k'") }
                }
                try await group.waitForAll()
            }
            #expect(try await store.items("SELECT n FROM k") == [["n": 40]])
        }
    }

    /// Concurrent UPDATEs, DELETEs and EVICTs by `_id` group-committed together (the batch locks
    /// their ids up front): each statement sees exactly the documents it would alone.
    @Test func concurrentPointWrites_matchWhatTheyWouldAlone() async throws {
        try await withStore { store, _ in
            for i in 0..<10 { _ = try await store.execute("INSERT INTO q DOCUMENTS ({_id: 'q\(i)', n: 0})") }
            let results = try await withThrowingTaskGroup(of: (Int, [Value]).self) { group in
                for i in 0..<40 {
                    group.addTask {
                        let id = "q\(i % 12)"  // q10 and q11 do not exist
                        let text = switch i {
                        case 36: "DELETE FROM q WHERE _id = :id"
                        case 37: "EVICT FROM q WHERE _id = :id"
                        default: "UPDATE q SET n = n + 1 WHERE _id = :id"
                        }
                        return (i, try await store.execute(text, arguments: ["id": .string(id)]).mutatedDocumentIDs)
                    }
                }
                var all: [Int: [Value]] = [:]
                for try await (i, ids) in group { all[i] = ids }
                return all
            }
            // (q0 and q1 are left out: whether their updates run before or after the DELETE and EVICT
            // depends on the order the tasks submit them.)
            for i in 0..<36 where i % 12 >= 2 { #expect(results[i] == (i % 12 < 10 ? [.string("q\(i % 12)")] : []), "statement \(i)") }
            #expect(results[36] == ["q0"] && results[37] == ["q1"])
            let rows = try await store.items("SELECT _id, n FROM q ORDER BY _id")
            // q0 deleted and q1 evicted at some point among their updates; the others got every update.
            #expect(rows.count == 8)
            for row in rows {
                guard case .string(let id)? = row["_id"], let k = Int(id.dropFirst()) else { Issue.record("\(row)"); continue }
                #expect(row["n"] == .int(k < 4 ? 4 : 3))  // q2, q3: i = 2, 14, 26, 38 and 3, 15, 27, 39
            }
        }
    }
}
