import BigPeerTestSupport
import DQL
import Foundation
import Postgres
import TestRandomness
import Testing
import Values
@testable import Store

/// The pushdown planner must never change a result. Random documents go into a real store; random
/// queries (mostly pushable, some not; with ORDER BY/LIMIT/OFFSET and COUNT) run through
/// `DocumentStore.execute` — SQL on PostgreSQL, then the residual in memory — and must return exactly
/// what the pure in-memory evaluator returns over the same stored documents.
@Suite struct PushdownDifferentialTests {
    static let values: [Value] = [
        .null, true, false, 0, 1, -1, 2.5, 1e20, .int(9007199254740993), .double(9007199254740992), .int(Int64.max),
        "", "x", "X", "é", "a%b", "a_b", "abc", "ab\\", "😀", [1], [1.0, "x"], ["x"], ["k": 1], ["k": 1.0], [:], [],
    ]
    static let literals = ["0", "1", "-1", "2.5", "1e20", "9007199254740993", "9007199254740992.0",
                           "'x'", "'X'", "'é'", "''", "TRUE", "FALSE", "NULL", "[1]", "{'k': 1}", ":p", ":nothing.x"]
    static let paths = ["a", "b", "c", "n.x", "tags[0]", "tags[1]", "_id"]

    func atom(_ rng: inout SeededRandom) -> String {
        let p = Self.paths[rng.below(Self.paths.count)], l = Self.literals[rng.below(Self.literals.count)]
        let l2 = Self.literals[rng.below(Self.literals.count)]
        switch rng.below(13) {
        case 12:  // no document in it: the planner's one-time filter
            return ["\(l) = \(l2)", "\(l) < \(l2)", "regexp_like(:p, 'x')", "regexp_like(:p, '^(a|a)*$')", ":p LIKE 'y%'",
                    "\(l) IS NULL", "\(l)", "NOT \(l)", "\(l) IN (\(l2), 1)"][rng.below(9)]
        case 11: return ["lower(\(p)) = 'x'", "\(p) = a", "\(p) ILIKE 'X%'", "\(p) < [2]", "\(p) + 1 > 1"][rng.below(5)]
        case 0, 10: return "\(p) = \(l)"
        case 1: return "\(p) != \(l)"
        case 2: return "\(p) \(["<", "<=", ">", ">="][rng.below(4)]) \(l)"
        case 3: return "\(l) \(["<", "<=", ">", ">="][rng.below(4)]) \(p)"
        case 4: return "\(p) \(rng.chance(50) ? "NOT " : "")IN (\(l2), \(l))"
        case 5: return "\(p) \(rng.chance(50) ? "NOT " : "")LIKE \(["'a%'", "'%b'", "'_'", "'%'", "'a!_b' ESCAPE '!'", "''"][rng.below(6)])"
        case 6: return "\(p) IS \(rng.chance(50) ? "NOT " : "")\(rng.chance(50) ? "NULL" : "MISSING")"
        case 7: return "\(p) \(rng.chance(50) ? "NOT " : "")BETWEEN \(l) AND \(l2)"
        case 8: return "\(l) \(rng.chance(50) ? "NOT " : "")IN tags"
        default: return "\(p) IN :arr"
        }
    }

    @Test func storeResultsEqualPureEvaluation() async throws {
        try await withStore { store, db in
            var rng = SeededRandom(seed: 2026)
            var docs: [Value] = []
            for i in 0..<300 {
                var o: [String: Value] = ["_id": .string("d\(i)")]
                for f in ["a", "b", "c"] where rng.chance(85) { o[f] = Self.values[rng.below(Self.values.count)] }
                if rng.chance(50) { o["n"] = ["x": Self.values[rng.below(Self.values.count)]] }
                if rng.chance(60) { o["tags"] = .array((0..<rng.below(3)).map { _ in Self.values[rng.below(Self.values.count)] }) }
                docs.append(.object(o))
            }
            for d in docs { _ = try await store.execute("INSERT INTO c DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": d]) }
            _ = try await store.execute("INSERT INTO other DOCUMENTS ({_id: 'z', a: 1})")

            // The in-memory side evaluates the documents exactly as stored (jsonb normalizes numbers).
            let stored = try await db.makePool().query("SELECT value FROM documents WHERE collection = 'c' AND NOT deleted")
            let storedDocs = try stored.map { try JSON.parse(try $0.decode(0, as: PostgresJSON.self).text) }
            let arguments: [String: Value] = ["p": "x", "arr": [1, "x", nil, 2.5], "nothing": [:]]
            let context = EvaluationContext(arguments: arguments)

            var checked = 0, withResidual = 0
            let planner = PushdownPlanner()
            for _ in 0..<600 {
                var condition = atom(&rng)
                for _ in 0..<rng.below(4) { condition = "(\(condition)) \(rng.chance(50) ? "AND" : "OR") \(rng.chance(30) ? "NOT " : "")\(atom(&rng))" }
                if rng.chance(20) { condition = "NOT (\(condition))" }
                var text = "SELECT * FROM c WHERE \(condition)"
                let ordered = rng.chance(30)
                if ordered {
                    text += " ORDER BY \(Self.paths[rng.below(Self.paths.count)])\(rng.chance(50) ? " DESC" : ""), \(Self.paths[rng.below(Self.paths.count)])"
                    text += " LIMIT \(rng.below(20)) OFFSET \(rng.below(5))"
                }
                let count = !ordered && rng.chance(15)
                if count { text = text.replacingOccurrences(of: "SELECT *", with: "SELECT COUNT(*) AS n") }
                guard case .select(let s) = try DQL.parse(text), let want = try? SelectQuery(s, context: context).run(storedDocs) else { continue }
                if (try? planner.plan(s, context: context))?.residual != nil { withResidual += 1 }
                let got = try await store.execute(text, arguments: arguments).items
                checked += 1
                if count {
                    #expect(got == want, "\(text)")
                } else {
                    let ids = got.compactMap { $0["_id"]?.stringValue }, wantIDs = want.compactMap { $0["_id"]?.stringValue }
                    #expect(ordered ? ids == wantIDs : ids.sorted() == wantIDs.sorted(), "\(text)")
                }
            }
            #expect(checked > 500)
            #expect(withResidual > 50)  // the mix really exercises residual filtering
        }
    }

    /// The store compiles `_id` to the id column (`idColumnMirrorsValueID`): point reads and `_id`
    /// ranges use the primary key, and the expression index on `value -> '_id'` is gone.
    @Test func idPathsUseThePrimaryKey() async throws {
        try await withStore { store, _ in
            guard case .select(let s) = try DQL.parse("SELECT * FROM c WHERE _id = :id ORDER BY _id") else { Issue.record("not a SELECT"); return }
            let plan = try store.planner.plan(s, context: EvaluationContext(arguments: ["id": "d1"]))
            #expect(plan.sql.contains(#"("id") = $"#))
            #expect(!plan.sql.contains("'_id'"))
            let indexes = try await store.pool.query("SELECT count(*) FROM pg_indexes WHERE indexname = 'documents_value_id'")
            #expect(try indexes[0].decode(0, as: Int64.self) == 0)
            _ = try await store.execute("INSERT INTO c DOCUMENTS ({_id: 'd1', a: 1}), ({_id: 'd2', a: 2}), ({_id: {k: 1}, a: 3})")
            #expect(try await store.items("SELECT * FROM c WHERE _id = 'd2'") == [["_id": "d2", "a": 2]])
            #expect(try await store.items("SELECT a FROM c WHERE _id.k = 1") == [["a": 3]])
            #expect(try await store.items("SELECT a FROM c WHERE _id >= 'd1' ORDER BY _id DESC") == [["a": 2], ["a": 1]])
            _ = try await store.execute("DELETE FROM c WHERE _id = 'd1'")
            #expect(try await store.items("SELECT a FROM c WHERE _id = 'd1'") == [])
        }
    }
}
