import BigPeerTestSupport
import DQL
import Postgres
import Testing
import Values
@testable import Store

/// The parsed-statement cache: repeated texts skip the parser, and nothing that may change
/// between two runs of the same text (strict mode, indexes, arguments, declarations) is cached.
@Suite struct StatementCacheTests {
    @Test func repeatedTextIsParsedOnce_longTextIsNeverKept_andTheCacheIsBounded() throws {
        let cache = StatementCache(capacity: 2, maxTextBytes: 64, limits: .default)
        let a = try cache.statement(for: "SELECT * FROM c WHERE _id = :id")
        let again = try cache.statement(for: "SELECT * FROM c WHERE _id = :id")
        #expect(a == again)
        #expect(cache.statistics.hits == 1 && cache.statistics.misses == 1)
        let long = "SELECT * FROM c WHERE " + Array(repeating: "a = 1", count: 20).joined(separator: " AND ")
        _ = try cache.statement(for: long)
        _ = try cache.statement(for: long)
        #expect(cache.statistics.entries == 1 && cache.statistics.hits == 1)
        _ = try cache.statement(for: "SELECT * FROM d")
        _ = try cache.statement(for: "SELECT * FROM e")  // evicts the oldest (c)
        #expect(cache.statistics.entries == 2)
        _ = try cache.statement(for: "SELECT * FROM c WHERE _id = :id")
        #expect(cache.statistics.hits == 1)  // a miss: it had been evicted
        // Errors are never cached, and stay errors.
        #expect(throws: DQLSyntaxError.self) { try cache.statement(for: "SELEC 1") }
        #expect(throws: DQLSyntaxError.self) { try cache.statement(for: "SELEC 1") }
    }

    @Test func sameTextFollowsStrictModeIndexesArgumentsAndDeclarations() async throws {
        try await withStore { store, _ in
            let update = "UPDATE p SET addr.city = :city WHERE _id = :id"
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'a', addr: {city: 'Oslo'}})")
            // Strict mode on: addr is a REGISTER, a dot-path write into it is refused.
            await #expect(throws: StoreError.self) { _ = try await store.execute(update, arguments: ["city": "Rome", "id": "a"]) }
            _ = try await store.execute("ALTER SYSTEM SET DQL_STRICT_MODE = false")
            _ = try await store.execute("INSERT INTO p DOCUMENTS ({_id: 'b', addr: {city: 'Oslo'}})")
            // The very same (cached) text now follows the new setting.
            let r = try await store.execute(update, arguments: ["city": "Bergen", "id": "b"])
            #expect(r.mutatedDocumentIDs == ["b"])
            _ = try await store.execute("ALTER SYSTEM RESET DQL_STRICT_MODE")
            await #expect(throws: StoreError.self) { _ = try await store.execute(update, arguments: ["city": "Rome", "id": "b"]) }
            // A declaration is part of the text: its own cache entry, its own types.
            let declared = try await store.execute("UPDATE COLLECTION p (addr MAP) SET addr.city = :city WHERE _id = :id",
                                                   arguments: ["city": "Rome", "id": "a"])
            #expect(declared.mutatedDocumentIDs == ["a"])

            // The same SELECT text before and after CREATE INDEX, with different arguments each time.
            let select = "SELECT _id FROM p WHERE addr.city = :city"
            #expect(try await store.items(select, ["city": "Rome"]) == [["_id": "a"]])
            _ = try await store.execute("CREATE INDEX city ON p (addr.city)")
            #expect(try await store.items(select, ["city": "Bergen"]) == [["_id": "b"]])
            #expect(try await store.items(select, ["city": 7]) == [])
            let explain = try await store.items("EXPLAIN " + select, ["city": "Rome"])
            #expect("\(explain)".contains("Pushed conditions: addr.city = :city"))
            #expect(store.statements.statistics.hits >= 4)
        }
    }

    @Test func oneInsertCarriesMoreThan256KiBOfPlaceholders() async throws {
        try await withStore { store, _ in
            let n = 30_000  // "(:d12345), " x 30k ≈ 330 KB: above the DQL default, below the store's limit
            var args: [String: Value] = [:]
            for i in 0..<n { args["d\(i)"] = .object(["_id": .string("d\(i)"), "n": .int(Int64(i))]) }
            let text = "INSERT INTO bulk DOCUMENTS " + (0..<n).map { "(:d\($0))" }.joined(separator: ", ")
            #expect(text.utf8.count > DQLParseLimits.default.maxStatementBytes)
            let r = try await store.execute(text, arguments: args)
            #expect(r.mutatedDocumentIDs.count == n)
            #expect(try await store.items("SELECT COUNT(*) AS n FROM bulk") == [["n": .int(Int64(n))]])
            // The change log got every document, numbered without gaps, under one transaction.
            let rows = try await store.pool.query("SELECT count(*), min(seq), max(seq), count(DISTINCT txn) FROM change_log WHERE collection = 'bulk'")[0]
            #expect(try rows.decode(0, as: Int.self) == n)
            #expect(try rows.decode(1, as: Int.self) == 0)
            #expect(try rows.decode(2, as: Int.self) == n - 1)
            #expect(try rows.decode(3, as: Int.self) == 1)
            #expect(try await store.items("SELECT n FROM bulk WHERE _id = 'd29999'") == [["n": 29999]])
        }
    }
}

/// Reused plans for `WHERE path = :param` reads must answer exactly what a fresh plan answers, for
/// every argument type (NULL and MISSING arguments are never served from the cache).
@Suite struct EqualityPlanCacheTests {
    @Test func cachedPlansAnswerLikeThePureEvaluator_forEveryArgumentType() async throws {
        try await withStore { store, _ in
            let docs: [Value] = [
                ["_id": "a", "v": "s", "w": ["c": 1]], ["_id": "b", "v": 1, "w": ["c": "s"]], ["_id": "c", "v": 1.5],
                ["_id": "d", "v": true, "w": ["c": true]], ["_id": "e", "v": ["k": 1]], ["_id": "f", "v": [1, 2]],
                ["_id": "g", "v": .null], ["_id": "h"],
            ]
            for d in docs { _ = try await store.execute("INSERT INTO c DOCUMENTS (:d)", arguments: ["d": d]) }
            let statements = [
                "SELECT * FROM c WHERE _id = :x", "SELECT * FROM c WHERE v = :x", "SELECT _id, :y AS echo FROM c WHERE :x = v",
                "SELECT * FROM c WHERE v = :x AND w.c = :y", "SELECT * FROM c", "SELECT COUNT(*) AS n FROM c WHERE v = :x",
            ]
            let values: [Value?] = ["a", "s", 1, 1.5, true, ["k": 1], [1, 2], .null, nil, "h", 1.0]
            func canonical(_ items: [Value]) -> [String] { items.map { JSON.string($0) }.sorted() }
            for text in statements {
                guard case .select = try DQL.parse(text) else { Issue.record("not a select"); continue }
                for x in values {
                    for y in [values[1], values[2], nil] {
                        var args: [String: Value] = [:]
                        if let x { args["x"] = x }
                        if let y { args["y"] = y }
                        // The reference: a store whose caches are empty, so it plans this request afresh.
                        let fresh = try await DocumentStore.open(pool: store.pool)
                        var expected: [Value]?
                        do { expected = try await fresh.items(text, args) } catch { expected = nil }
                        // Twice: the first run may record the plan, the second may use it.
                        for _ in 0..<2 {
                            var got: [Value]?
                            do { got = try await store.items(text, args) } catch { got = nil }
                            #expect(got.map(canonical) == expected.map(canonical), "\(text) with \(args)")
                        }
                    }
                }
            }
            // The shapes that qualify were cached; COUNT(*) and filters that are not equalities were not.
            #expect(store.equalityPlans.count == 5)
            guard case .select(let point) = try DQL.parse("SELECT * FROM c WHERE _id = :x") else { Issue.record("not a SELECT"); return }
            let context = EvaluationContext(arguments: ["x": "a"])
            let cached = try #require(try store.equalityPlans.plan(point, context: context))
            let fresh = try store.planner.plan(point, context: context)
            #expect(cached.sql == "SELECT t.n, q.* FROM bigpeer_txn t LEFT JOIN LATERAL (" + fresh.sql + ") q ON true")
            #expect(cached.binds == fresh.parameters)
            #expect(try store.equalityPlans.plan(point, context: EvaluationContext(arguments: ["x": .null])) == nil)
            #expect(try store.equalityPlans.plan(point, context: EvaluationContext(arguments: [:])) == nil)
        }
    }
}
