import Testing
import TestRandomness
import Values
@testable import DQL

@Suite struct PushdownTests {
    let planner = PushdownPlanner()

    func plan(_ text: String, _ args: [String: Value] = [:]) throws -> PushdownPlan {
        guard case .select(let s) = try DQL.parse(text) else { throw DQLEvaluationError.invalidStatement("not a select") }
        return try planner.plan(s, context: EvaluationContext(arguments: args))
    }

    @Test func equality_isIndexableJsonbEquality() throws {
        let p = try plan("SELECT * FROM cars WHERE color = :c", ["c": "blue"])
        #expect(p.sql == #"SELECT "value" FROM "documents" WHERE "collection" = $1::text AND (("value" -> 'color') = $2::jsonb)"#)
        #expect(p.parameters == [.text("cars"), .jsonb("\"blue\"")])
        #expect(p.residual == nil && p.output == .documents)
    }

    /// A quote followed by a combining mark is one Swift Character that is not `'`, but PostgreSQL
    /// reads a quote byte: quoting must double it anyway, or the name ends the SQL literal.
    @Test func quoteInsideAGraphemeCluster_isStillDoubled() throws {
        let p = try plan("SELECT * FROM c WHERE `a'\u{301}) OR (TRUE` = 1")
        #expect(p.sql.contains("(\"value\" -> 'a''\u{301}) OR (TRUE') = $2::jsonb"))
        #expect(SQLBuilder.quoteIdentifier("x\"\u{301}") == "\"x\"\"\u{301}\"")
    }

    @Test func comparisons_guardTheJsonType() throws {
        let p = try plan("SELECT * FROM cars WHERE specs.hp >= 100 AND 'm' > name AND a['it''s'][2] < TRUE")
        #expect(p.sql.contains(#"(jsonb_typeof(("value" -> 'specs' -> 'hp')) = 'number' AND ("value" -> 'specs' -> 'hp') >= $2::jsonb)"#))
        #expect(p.sql.contains(#"(jsonb_typeof(("value" -> 'name')) = 'string' AND (("value" -> 'name') #>> '{}') COLLATE "C" < $3::text)"#))
        #expect(p.sql.contains(#"(jsonb_typeof(("value" -> 'a' -> 'it''s' -> 2)) = 'boolean' AND ("value" -> 'a' -> 'it''s' -> 2) < $4::jsonb)"#))
        #expect(p.parameters == [.text("cars"), .jsonb("100"), .text("m"), .jsonb("true")])
    }

    @Test func not_usesTheExactFalseSide() throws {
        let p = try plan("SELECT * FROM c WHERE NOT (n < 5 OR s = 'x')")
        #expect(p.sql.hasSuffix(#"AND ((jsonb_typeof(("value" -> 'n')) = 'number' AND ("value" -> 'n') >= $2::jsonb) AND (("value" -> 's') <> $3::jsonb AND ("value" -> 's') <> 'null'::jsonb))"#))
    }

    @Test func inLikeIsNullMissing() throws {
        let p = try plan("SELECT * FROM c WHERE k IN (1, NULL, 'a') AND name LIKE 'ab%' AND x IS NULL AND y IS NOT MISSING AND 'red' IN tags")
        #expect(p.sql.contains(#"(("value" -> 'k') IN ($2::jsonb, $3::jsonb))"#))
        #expect(p.sql.contains(#"(jsonb_typeof(("value" -> 'name')) = 'string' AND ((("value" -> 'name') #>> '{}') COLLATE "C" LIKE $4::text ESCAPE $5::text))"#))
        #expect(p.sql.contains(#"(("value" -> 'x') = 'null'::jsonb)"#))
        #expect(p.sql.contains(#"(("value" -> 'y') IS NOT NULL)"#))
        #expect(p.sql.contains(#"(jsonb_typeof(("value" -> 'tags')) = 'array' AND ("value" -> 'tags') @> $6::jsonb)"#))
        #expect(p.parameters == [.text("c"), .jsonb("1"), .jsonb("\"a\""), .text("ab%"), .text("\\"), .jsonb("[\"red\"]")])
    }

    /// A condition with no document in it is evaluated once by the planner (PostgreSQL's one-time
    /// filter): a false one reads no row, a true one leaves the rest pushable, LIMIT included.
    @Test func aConditionWithoutADocument_isEvaluatedOnce() throws {
        let regex: [String: Value] = ["s": .string(String(repeating: "a", count: 25) + "b"), "p": "^(a|a)*$"]
        let never = try plan("SELECT * FROM c WHERE regexp_like(:s, :p)", regex)
        #expect(never.residual == nil)
        #expect(never.sql.hasSuffix(" AND FALSE"))
        #expect(never.readsNoRow)
        let always = try plan("SELECT * FROM c WHERE NOT regexp_like(:s, :p) AND a = 1 LIMIT 3", regex)
        #expect(always.residual == nil && always.limitPushed)
        #expect(always.sql.contains(" AND TRUE AND "))
        #expect(!always.readsNoRow)
        // Inside OR and NOT, and comparisons of two constants.
        let mixed = try plan("SELECT * FROM c WHERE (a = 1 OR :n > 3) AND :n = :n", ["n": 5])
        #expect(mixed.residual == nil)
        #expect(mixed.sql.contains("OR TRUE)"))
        #expect(mixed.explanation.contains("Pushed conditions: (a = 1 OR :n > 3) AND :n = :n"), "\(mixed.explanation)")
        // NULL and non-booleans are never true, and NOT of them never either (an unbound parameter
        // is an error: it stays in memory).
        for condition in ["NOT (:n + 1)", ":z", "NOT NULL"] {
            let p = try plan("SELECT * FROM c WHERE " + condition, ["n": 5, "z": .null])
            #expect(p.residual == nil, "\(condition)")
            #expect(p.sql.hasSuffix(" AND FALSE"), "\(condition): \(p.sql)")
        }
        // A constant whose evaluation fails stays in memory, which reports the error per document
        // as before; and anything that reads the document is not a constant.
        let bad = try plan("SELECT * FROM c WHERE regexp_like('a', '(') AND length(a) > 1")
        #expect(bad.residual.map { Printer.print($0) } == "regexp_like('a', '(') AND length(a) > 1")
    }

    @Test func unpushable_staysResidual() throws {
        let p = try plan("SELECT * FROM c WHERE a = 1 AND lower(b) = 'x' AND (c = 1 OR d ILIKE 'y') AND e = f AND g < [1]")
        #expect(p.pushedConditions == [.binary(.equal, .path(Path("a")), .literal(1))])
        #expect(p.residual.map { Printer.print($0) } == "lower(b) = 'x' AND (c = 1 OR d ILIKE 'y') AND e = f AND g < [1]")
        // `c = 1` bound a parameter before `d ILIKE 'y'` failed: it must not stay behind.
        #expect(p.parameters == [.text("c"), .jsonb("1")])
        #expect(!p.sql.contains("$3"))
        #expect(!p.limitPushed)
    }

    @Test func comparisonWithNullOrMissing_neverHolds() throws {
        let p = try plan("SELECT * FROM c WHERE a = NULL OR b = :p.nothing", ["p": [:]])
        #expect(p.sql.hasSuffix("AND (FALSE OR FALSE)"))
        #expect(!p.readsNoRow)  // only a whole conjunct that is FALSE is detected
        #expect(try plan("SELECT * FROM c WHERE b = 1 AND a = NULL", [:]).readsNoRow)
    }

    @Test func orderAndLimit_fetchWithTies() throws {
        let p = try plan("SELECT * FROM c WHERE a = 1 ORDER BY year DESC LIMIT 10 OFFSET 5")
        #expect(p.orderPushed && p.limitPushed)
        #expect(p.sql.contains(#"ORDER BY (CASE WHEN ("value" -> 'year') IS NULL THEN 0 ELSE CASE jsonb_typeof(("value" -> 'year')) WHEN 'null' THEN 1"#))
        #expect(p.sql.contains(#"(CASE WHEN jsonb_typeof(("value" -> 'year')) = 'number' THEN (("value" -> 'year'))::numeric END) DESC"#))
        #expect(p.sql.contains(#"(CASE WHEN jsonb_typeof(("value" -> 'year')) IN ('array', 'object') THEN NULL ELSE ((CASE WHEN jsonb_typeof(("value" -> '_id')) = 'string' THEN (("value" -> '_id') #>> '{}') END) COLLATE "C") END) ASC"#))
        #expect(p.sql.hasSuffix("FETCH FIRST ($3::bigint) ROWS WITH TIES"))
        #expect(p.parameters.last == .bigint(15))
        #expect(p.memoryQuery.offset == 5 && p.memoryQuery.limit == 10)
    }

    @Test func limit_notPushedPastResidualOrDistinctOrAggregates() throws {
        #expect(try !plan("SELECT * FROM c WHERE lower(a) = 'x' LIMIT 1").limitPushed)
        #expect(try !plan("SELECT DISTINCT a FROM c LIMIT 1").limitPushed)
        #expect(try !plan("SELECT a, COUNT(*) FROM c GROUP BY a LIMIT 1").limitPushed)
        #expect(try !plan("SELECT * FROM c ORDER BY lower(a) LIMIT 1").limitPushed)
        let p = try plan("SELECT * FROM c LIMIT 3")
        #expect(p.sql == #"SELECT "value" FROM "documents" WHERE "collection" = $1::text LIMIT $2::bigint"#)
    }

    @Test func count_isPushedWhenAlone() throws {
        let p = try plan("SELECT COUNT(*) AS n FROM c WHERE a > 1")
        #expect(p.sql.hasPrefix(#"SELECT count(*) FROM "documents" WHERE "collection" = $1::text AND"#))
        #expect(p.output == .count(column: "n"))
        #expect(p.countRows(42) == [["n": 42]])
        #expect(try plan("SELECT COUNT(*) FROM c OFFSET 1").countRows(3).isEmpty)
        #expect(try plan("SELECT COUNT(*) FROM c LIMIT 9223372036854775807 OFFSET 1").countRows(3).isEmpty)
        #expect(try plan("SELECT COUNT(*) FROM c LIMIT 9223372036854775807").countRows(3) == [["($1)": 3]])
        #expect(try plan("SELECT COUNT(*) FROM c WHERE lower(a) = 'x'").output == .documents)
    }

    @Test func indexes_matchTheQueryExpressions() throws {
        guard case .createIndex(let c) = try DQL.parse("CREATE INDEX IF NOT EXISTS by_hp ON cars (specs.hp, color)") else { Issue.record(); return }
        let ddl = planner.createIndexSQL(c)
        #expect(ddl.hasPrefix(#"CREATE INDEX IF NOT EXISTS "dql_cars_by_hp_"#))
        #expect(ddl.hasSuffix(#" ON "documents" ("collection", (("value" -> 'specs' -> 'hp')), (("value" -> 'color')))"#))
        let q = try plan("SELECT * FROM cars WHERE color = 'red'")
        #expect(q.sql.contains(#"(("value" -> 'color') = $2::jsonb)"#))  // same expression as the index column
        guard case .dropIndex(let d) = try DQL.parse("DROP INDEX by_hp ON cars") else { Issue.record(); return }
        #expect(try planner.dropIndexSQL(d) == "DROP INDEX \"\(planner.indexName(collection: "cars", name: "by_hp"))\"")
        #expect(planner.indexName(collection: "a", name: "b_c") != planner.indexName(collection: "a_b", name: "c"))
    }

    @Test func explain_showsSQLAndResidual() throws {
        let text = try planner.explain(DQL.parse("EXPLAIN SELECT a FROM c WHERE a = 1 AND lower(b) = 'x' ORDER BY a LIMIT 2"), context: EvaluationContext())
        #expect(text.contains("PostgreSQL:\n  SELECT \"value\" FROM \"documents\""))
        #expect(text.contains("$2 = '1' (jsonb)"))
        #expect(text.contains("Residual filter (in memory): lower(b) = 'x'"))
        #expect(text.contains("In memory: sort (exact DQL order), LIMIT 2, projection"))
    }

    /// The planner's split is sound: filtering by the pushed conditions, then running the memory
    /// query, gives exactly the full in-memory result (random documents and conditions).
    @Test func split_pushedThenMemory_equalsFullQuery() throws {
        var rng = SplitMix64(seed: 99)
        let fields = ["a", "b", "c"]
        let values: [Value] = [nil, true, false, 0, 1, 2.5, -3, "x", "Y", "", [1], ["k": 1]]
        func doc(_ i: Int) -> Value {
            var o: [String: Value] = ["_id": .string("d\(i)")]
            for f in fields where rng.chance(80) { o[f] = values[rng.below(values.count)] }
            return .object(o)
        }
        let docs = (0..<60).map(doc)
        let atoms = ["a = 1", "b < 'x'", "c IS NULL", "a IS MISSING", "b IN (1, 'x', NULL)", "c LIKE '%'", "lower(b) = 'y'",
                     "a > 0", "NOT c", "b BETWEEN 0 AND 2", "a = b", "1 IN c", "c = [1]"]
        for _ in 0..<300 {
            var condition = atoms[rng.below(atoms.count)]
            for _ in 0..<rng.below(3) {
                condition = "(\(condition)) \(rng.chance(50) ? "AND" : "OR") \(rng.chance(30) ? "NOT " : "")\(atoms[rng.below(atoms.count)])"
            }
            let text = "SELECT * FROM c WHERE \(condition) ORDER BY a, b DESC LIMIT 7 OFFSET 2"
            guard case .select(let s) = try DQL.parse(text) else { continue }
            let p = try planner.plan(s, context: EvaluationContext())
            let full = try SelectQuery(s, context: EvaluationContext()).run(docs)
            let ev = Evaluator(context: EvaluationContext())
            let prefiltered = try docs.filter { d in try p.pushedConditions.allSatisfy { try ev.isTrue($0, in: d) } }
            #expect(try p.memoryQuery.run(prefiltered) == full, "\(text)")
        }
    }
}

@Suite struct PushdownIdColumnTests {
    @Test func idEquality_alsoUsesTheIdColumnWhenTheStoreSaysSo() throws {
        guard case .select(let s) = try DQL.parse("SELECT * FROM c WHERE :id = _id AND a = 1") else { Issue.record("not a SELECT"); return }
        let ctx = EvaluationContext(arguments: ["id": "k1"])
        let with = try PushdownPlanner(table: PushdownTable(idColumnHoldsStringIds: true)).plan(s, context: ctx)
        #expect(with.sql.contains(#"(("value" -> '_id') = $2::jsonb) AND "id" = $3::text AND"#))
        #expect(with.parameters[2] == .text("k1"))
        let without = try PushdownPlanner().plan(s, context: ctx)
        #expect(!without.sql.contains(#""id" ="#))
        let objectId = try PushdownPlanner(table: PushdownTable(idColumnHoldsStringIds: true))
            .plan(s, context: EvaluationContext(arguments: ["id": ["a": 1]]))
        #expect(!objectId.sql.contains(#""id" ="#))
    }
}
