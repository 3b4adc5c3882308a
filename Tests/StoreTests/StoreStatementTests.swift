import BigPeerTestSupport
import DQL
import Postgres
import Testing
import Values
@testable import Store

@Suite struct StoreStatementTests {
    @Test func insertSelectUpdateDeleteRoundTrip() async throws {
        try await withStore { store, db in
            let ins = try await store.execute("INSERT INTO cars DOCUMENTS (:a), (:b)", arguments: [
                "a": ["_id": "c1", "color": "red", "year": 2019], "b": ["_id": "c2", "color": "blue", "year": 2001],
            ])
            #expect(ins.queryType == "insert")
            #expect(ins.mutatedDocumentIDs == ["c1", "c2"])
            #expect(ins.transactionID == 1)

            let red = try await store.execute("SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"])
            #expect(red.items == [["_id": "c1", "color": "red", "year": 2019]])
            #expect(red.transactionID == 1)

            let upd = try await store.execute("UPDATE cars SET color = 'green', doors = 4 WHERE year > 2010")
            #expect(upd.mutatedDocumentIDs == ["c1"])
            #expect(upd.transactionID == 2)
            #expect(try await store.items("SELECT color, doors FROM cars WHERE _id = 'c1'") == [["color": "green", "doors": 4]])

            let del = try await store.execute("DELETE FROM cars WHERE color = 'blue'")
            #expect(del.mutatedDocumentIDs == ["c2"])
            #expect(try await store.items("SELECT _id FROM cars ORDER BY _id") == [["_id": "c1"]])
            #expect(try await store.items("SELECT COUNT(*) AS n FROM cars") == [["n": 1]])

            // Analysts see the same through plain SQL, updated in the same transactions.
            let pool = db.makePool()
            let rows = try await pool.query("SELECT _id, value->>'color' FROM analytics.cars")
            #expect(rows.count == 1)
            #expect(try rows[0].decode(1, as: String.self) == "green")
            let log = try await pool.query("SELECT txn, kind FROM change_log ORDER BY txn, seq")
            #expect(try log.map { try $0.decode(1, as: String.self) } == ["upsert", "upsert", "upsert", "delete"])
        }
    }

    @Test func conflictPoliciesReportMutationsExactly() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 1})")
            await #expect {
                _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 2}), ({_id: 'b', v: 2})")
            } throws: { e in
                guard case StoreError.conflict = e else { return false }
                return true
            }
            // The failed statement wrote nothing, not even 'b'.
            #expect(try await store.items("SELECT _id FROM t ORDER BY _id") == [["_id": "a"]])

            let nothing = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 3}) ON ID CONFLICT DO NOTHING")
            #expect(nothing.mutatedDocumentIDs.isEmpty)
            let same = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 1}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
            #expect(same.mutatedDocumentIDs.isEmpty)
            let diff = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 5}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
            #expect(diff.mutatedDocumentIDs == ["a"])
            let upd = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 5}) ON ID CONFLICT DO UPDATE")
            #expect(upd.mutatedDocumentIDs == ["a"])  // every supplied field is a new write
            #expect(try await store.items("SELECT v FROM t") == [["v": 5]])
        }
    }

    @Test func initialDocumentsLoseToRealWrites() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO s DOCUMENTS ({_id: 'x', theme: 'dark'})")
            let r = try await store.execute("INSERT INTO s INITIAL DOCUMENTS ({_id: 'x', theme: 'light'}), ({_id: 'y', theme: 'light'})")
            #expect(r.mutatedDocumentIDs == ["y"])
            #expect(try await store.items("SELECT _id, theme FROM s ORDER BY _id") == [["_id": "x", "theme": "dark"], ["_id": "y", "theme": "light"]])
        }
    }

    @Test func deletedDocumentCanBeReinserted() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 1, old: true})")
            _ = try await store.execute("DELETE FROM t WHERE _id = 'a'")
            #expect(try await store.items("SELECT * FROM t").isEmpty)
            let again = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a', v: 2})")
            #expect(again.mutatedDocumentIDs == ["a"])
            #expect(try await store.items("SELECT * FROM t") == [["_id": "a", "v": 2]])
        }
    }

    @Test func evictRemovesRowsWithoutTombstone() async throws {
        try await withStore { store, db in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'a'}), ({_id: 'b'})")
            let r = try await store.execute("EVICT FROM t WHERE _id = 'a'")
            #expect(r.queryType == "evict")
            #expect(r.mutatedDocumentIDs == ["a"])
            let rows = try await db.makePool().query("SELECT count(*) FROM documents WHERE collection = 't'")
            #expect(try rows[0].decode(0, as: Int.self) == 1)
        }
    }

    @Test func countersAddUpAndRestart() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: 'k', n: 0})")
            try await withThrowingTaskGroup(of: Void.self) { g in
                for _ in 0..<20 {
                    g.addTask { _ = try await store.execute("UPDATE COLLECTION c (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k'") }
                }
                try await g.waitForAll()
            }
            #expect(try await store.items("SELECT n FROM c") == [["n": 20]])
            _ = try await store.execute("UPDATE COLLECTION c (n COUNTER) APPLY n RESTART WITH 5 WHERE _id = 'k'")
            #expect(try await store.items("SELECT n FROM c") == [["n": 5]])
        }
    }

    @Test func strictModeGovernsNestedPaths() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'a', addr: {city: 'Oslo'}})")
            await #expect(throws: StoreError.self) { _ = try await store.execute("UPDATE p SET addr.city = 'Rome' WHERE _id = 'a'") }
            let declared = try await store.execute("UPDATE COLLECTION p (addr MAP) SET addr.city = 'Rome' WHERE _id = 'a'")
            #expect(declared.mutatedDocumentIDs.isEmpty || declared.mutatedDocumentIDs == ["a"])
            _ = try await store.execute("ALTER SYSTEM SET DQL_STRICT_MODE = false")
            #expect(try await store.items("SHOW DQL_STRICT_MODE") == [["name": "DQL_STRICT_MODE", "value": false]])
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'b', addr: {city: 'Oslo', zip: '0150'}})")
            let r = try await store.execute("UPDATE p SET addr.city = 'Bergen' WHERE _id = 'b'")
            #expect(r.mutatedDocumentIDs == ["b"])
            #expect(try await store.items("SELECT addr FROM p WHERE _id = 'b'") == [["addr": ["city": "Bergen", "zip": "0150"]]])
            _ = try await store.execute("ALTER SYSTEM RESET DQL_STRICT_MODE")
            #expect(try await store.items("SHOW DQL_STRICT_MODE") == [["name": "DQL_STRICT_MODE", "value": true]])
        }
    }

    @Test func generatedIdsAndObjectIds() async throws {
        try await withStore { store, _ in
            let r = try await store.execute("INSERT INTO t DOCUMENTS ({v: 1})")
            guard case .string(let id)? = r.mutatedDocumentIDs.first else { Issue.record("no generated id"); return }
            #expect(id.count == 32)
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: {a: 1, b: 'x'}, v: 2})")
            // Key order in an object id does not matter.
            #expect(try await store.items("SELECT v FROM t WHERE _id = {b: 'x', a: 1}") == [["v": 2]])
            await #expect(throws: StoreError.self) { _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: {b: 'x', a: 1}})") }
        }
    }

    @Test func errorsAreTypedByWhoseFaultTheyAre() async throws {
        try await withStore { store, _ in
            do throws(StoreError) { _ = try await store.execute("SELECT * FRM t"); Issue.record("no error") } catch {
                guard case .syntax(let e) = error else { Issue.record("\(error)"); return }
                #expect(e.location.line == 1 && e.location.column == 10)
            }
            do throws(StoreError) { _ = try await store.execute("SELECT * FROM t", minimumTransaction: 10, transactionWait: .milliseconds(100)); Issue.record("no error") } catch {
                #expect(StoreErrorCase(error) == .unknownTransaction)
            }
            // PostgreSQL text and jsonb cannot hold U+0000: the input's fault, never a database error.
            do throws(StoreError) { _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'nul', v: :v})", arguments: ["v": "a\u{0}b"]); Issue.record("no error") } catch {
                #expect(StoreErrorCase(error) == .invalid)
            }
            let big = String(repeating: "x", count: 6 << 20)
            do throws(StoreError) { _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'big', v: :v})", arguments: ["v": .string(big)]); Issue.record("no error") } catch {
                #expect(StoreErrorCase(error) == .tooLarge)
            }
        }
    }

    @Test func createIndexMakesARealExpressionIndex() async throws {
        try await withStore { store, db in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', color: 'red'})")
            let r = try await store.execute("CREATE INDEX color_idx ON cars (color)")
            #expect(r.queryType == "create_index")
            let pool = db.makePool()
            let idx = try await pool.query("SELECT indexdef FROM pg_indexes WHERE tablename = 'documents' AND indexname LIKE 'dql_cars_color_idx_%'")
            #expect(idx.count == 1)
            #expect(try idx[0].decode(0, as: String.self).contains("'color'"))
            _ = try await store.execute("DROP INDEX color_idx ON cars")
            #expect(try await pool.query("SELECT 1 FROM pg_indexes WHERE indexname LIKE 'dql_cars_color_idx_%'").isEmpty)
        }
    }

    @Test func concurrentWritesAreGroupCommittedAndEachAcknowledged() async throws {
        try await withStore { store, db in
            let results = try await withThrowingTaskGroup(of: ExecuteResult.self) { g in
                for i in 0..<200 {
                    g.addTask { try await store.execute("INSERT INTO g DOCUMENTS ({_id: :id, i: :i})", arguments: ["id": .string("d\(i)"), "i": .int(Int64(i))]) }
                }
                return try await g.reduce(into: []) { $0.append($1) }
            }
            #expect(results.count == 200)
            let txns = Set(results.map(\.transactionID))
            #expect(txns.count < 200)  // several statements shared a commit
            #expect(try await store.items("SELECT COUNT(*) AS n FROM g") == [["n": 200]])
            let n = try await db.makePool().query("SELECT max(txn), count(DISTINCT txn) FROM change_log")[0]
            #expect(try n.decode(0, as: Int64.self) == txns.max())
            #expect(try n.decode(1, as: Int.self) == txns.count)
        }
    }

    @Test func aBadStatementInABatchDoesNotFailTheOthers() async throws {
        try await withStore { store, _ in
            _ = try await store.execute("INSERT INTO t DOCUMENTS ({_id: 'dup'})")
            let outcomes = await withTaskGroup(of: Bool.self) { g in
                for i in 0..<50 {
                    g.addTask {
                        let stmt = i % 10 == 0 ? "INSERT INTO t DOCUMENTS ({_id: 'dup'})" : "INSERT INTO t DOCUMENTS ({_id: 'ok\(i)'})"
                        return (try? await store.execute(stmt)) != nil
                    }
                }
                return await g.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(outcomes.filter { $0 }.count == 45)
            #expect(try await store.items("SELECT COUNT(*) AS n FROM t") == [["n": 46]])
        }
    }
}
