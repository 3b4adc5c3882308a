import Testing
import Values
@testable import DQL

@Suite struct ParserTests {
    func parse(_ s: String) throws -> Statement { try DQL.parse(s) }
    func select(_ s: String) throws -> SelectStatement {
        guard case .select(let q) = try parse(s) else { throw DQLEvaluationError.invalidStatement("not a select") }
        return q
    }
    func expr(_ s: String) throws -> Expression {
        guard let f = try select("SELECT * FROM c WHERE " + s).filter else { throw DQLEvaluationError.invalidStatement("no filter") }
        return f
    }

    @Test func select_allClauses() throws {
        let q = try select("""
            select distinct color AS c, COUNT(*), sum(DISTINCT price) FROM cars
            WHERE a.b[0].`x y` >= 3 GROUP BY color HAVING COUNT(*) > 1 ORDER BY c DESC, color ASC, make LIMIT 10 OFFSET :off
            """)
        #expect(q.distinct)
        #expect(q.projections == [
            .expression(.path(Path("color")), alias: "c"),
            .expression(.aggregate(.count, nil, distinct: false), alias: nil),
            .expression(.aggregate(.sum, .path(Path("price")), distinct: true), alias: nil),
        ])
        #expect(q.from == CollectionReference("cars"))
        #expect(q.filter == .binary(.greaterEqual, .path(Path("a", [.field("b"), .index(0), .field("x y")])), .literal(3)))
        #expect(q.groupBy == [.path(Path("color"))])
        #expect(q.having == .binary(.greater, .aggregate(.count, nil, distinct: false), .literal(1)))
        #expect(q.orderBy == [OrderingTerm(.path(Path("c")), descending: true), OrderingTerm(.path(Path("color")), explicitDirection: true), OrderingTerm(.path(Path("make")))])
        #expect(q.limit == .literal(10))
        #expect(q.offset == .parameter("off"))
    }

    @Test func select_collectionDeclaration() throws {
        let q = try select("SELECT * FROM COLLECTION cars (properties MAP, stats.views COUNTER, pic ATTACHMENT)")
        #expect(q.from == CollectionReference("cars", declarations: [
            FieldDeclaration(Path("properties"), .map), FieldDeclaration(Path("stats", [.field("views")]), .counter),
            FieldDeclaration(Path("pic"), .attachment),
        ]))
        // A collection that is merely called "collection".
        #expect(try select("SELECT * FROM collection WHERE x = 1").from == CollectionReference("collection"))
    }

    @Test func expressions_precedence() throws {
        #expect(try expr("a OR b AND NOT c") == .binary(.or, .path(Path("a")), .binary(.and, .path(Path("b")), .unary(.not, .path(Path("c"))))))
        #expect(try expr("1 + 2 * 3 = 7") == .binary(.equal, .binary(.add, .literal(1), .binary(.multiply, .literal(2), .literal(3))), .literal(7)))
        #expect(try expr("a || b = 'xy'") == .binary(.equal, .binary(.concat, .path(Path("a")), .path(Path("b"))), .literal("xy")))
        #expect(try expr("x - 1 - 2 > 0") == .binary(.greater, .binary(.subtract, .binary(.subtract, .path(Path("x")), .literal(1)), .literal(2)), .literal(0)))
        #expect(try expr("-9223372036854775808 < -x") == .binary(.less, .literal(.int(Int64.min)), .unary(.negate, .path(Path("x")))))
        #expect(try expr("9223372036854775808 > 1.5e3") == .binary(.greater, .literal(.double(9223372036854775808)), .literal(.double(1500))))
    }

    @Test func expressions_predicates() throws {
        #expect(try expr("x NOT BETWEEN 1 AND 5") == .between(.path(Path("x")), low: .literal(1), high: .literal(5), negated: true))
        #expect(try expr("x IN (1, 'a', :p)") == .inList(.path(Path("x")), [.literal(1), .literal("a"), .parameter("p")], negated: false))
        #expect(try expr("x NOT IN :list") == .inArray(.path(Path("x")), .parameter("list"), negated: true))
        #expect(try expr("name ILIKE 'a%' ESCAPE '!'") == .like(.path(Path("name")), pattern: .literal("a%"), escape: .literal("!"), caseInsensitive: true, negated: false))
        #expect(try expr("x IS NOT NULL AND y IS MISSING") == .binary(.and, .isNull(.path(Path("x")), negated: true), .isMissing(.path(Path("y")), negated: false)))
        #expect(try expr("coalesce(a, \"b\") = {'k': [1, TRUE, NULL], v: :p.x}") == .binary(.equal,
            .call("coalesce", [.path(Path("a")), .literal("b")]),
            .object([ObjectEntry("k", .array([.literal(1), .literal(true), .literal(nil)])), ObjectEntry("v", .access(.parameter("p"), .field("x")))])))
        #expect(try expr("min(a, b) = max(c)") == .binary(.equal, .call("min", [.path(Path("a")), .path(Path("b"))]), .aggregate(.max, .path(Path("c")), distinct: false)))
        #expect(try expr("a['b c'].`order`[2] = 1") == .binary(.equal, .path(Path("a", [.field("b c"), .field("order"), .index(2)])), .literal(1)))
    }

    @Test func insert_forms() throws {
        #expect(try parse("INSERT INTO cars DOCUMENTS (:a), ({'_id': 1})") == .insert(InsertStatement(
            collection: CollectionReference("cars"), documents: [.parameter("a"), .object([ObjectEntry("_id", .literal(1))])])))
        #expect(try parse("insert into cars values (:a) on id conflict do update_local_diff") == .insert(InsertStatement(
            collection: CollectionReference("cars"), documents: [.parameter("a")], onIdConflict: .doUpdateLocalDiff)))
        #expect(try parse("INSERT INTO COLLECTION cars (p MAP) INITIAL DOCUMENTS (:d) ON ID CONFLICT DO NOTHING") == .insert(InsertStatement(
            collection: CollectionReference("cars", declarations: [FieldDeclaration(Path("p"), .map)]), initial: true,
            documents: [.parameter("d")], onIdConflict: .doNothing)))
        for (text, policy) in [("FAIL", ConflictPolicy.fail), ("DO FAIL", .fail), ("DO UPDATE", .doUpdate)] {
            guard case .insert(let i) = try parse("INSERT INTO c DOCUMENTS (:d) ON ID CONFLICT " + text) else { Issue.record(); continue }
            #expect(i.onIdConflict == policy)
        }
    }

    @Test func update_forms() throws {
        guard case .update(let u) = try parse("""
            UPDATE COLLECTION orders (views COUNTER) APPLY views INCREMENT BY 1, likes PN_INCREMENT BY -2, total RESTART,
            n RESTART WITH 5 SET a.b = 'x', c = c + 1 UNSET d, e.f WHERE _id = :id ORDER BY ts DESC LIMIT 5 OFFSET 1
            """) else { Issue.record("not an update"); return }
        #expect(u.apply == [
            CounterUpdate(Path("views"), .increment(.literal(1), legacy: false)),
            CounterUpdate(Path("likes"), .increment(.literal(-2), legacy: true)),
            CounterUpdate(Path("total"), .restart(nil)), CounterUpdate(Path("n"), .restart(.literal(5))),
        ])
        #expect(u.set == [Assignment(Path("a", [.field("b")]), .literal("x")), Assignment(Path("c"), .binary(.add, .path(Path("c")), .literal(1)))])
        #expect(u.unset == [Path("d"), Path("e", [.field("f")])])
        #expect(u.filter == .binary(.equal, .path(Path("_id")), .parameter("id")))
        #expect(u.orderBy == [OrderingTerm(.path(Path("ts")), descending: true)])
        #expect(u.limit == .literal(5) && u.offset == .literal(1))
    }

    @Test func otherStatements() throws {
        #expect(try parse("DELETE FROM cars WHERE x = 1") == .delete(RemoveStatement(collection: CollectionReference("cars"), filter: .binary(.equal, .path(Path("x")), .literal(1)))))
        #expect(try parse("EVICT FROM cars") == .evict(RemoveStatement(collection: CollectionReference("cars"), filter: nil)))
        #expect(try parse("ALTER SYSTEM SET DQL_STRICT_MODE = false") == .system(.set("DQL_STRICT_MODE", .literal(false))))
        #expect(try parse("alter system set x to 3") == .system(.set("x", .literal(3))))
        #expect(try parse("ALTER SYSTEM RESET ALL") == .system(.reset(nil)))
        #expect(try parse("ALTER SYSTEM RESET DQL_STRICT_MODE") == .system(.reset("DQL_STRICT_MODE")))
        #expect(try parse("SHOW ALL") == .system(.show(nil)))
        #expect(try parse("show DQL_STRICT_MODE") == .system(.show("DQL_STRICT_MODE")))
        #expect(try parse("CREATE INDEX IF NOT EXISTS by_color ON cars (color, specs.year)") == .createIndex(CreateIndexStatement(
            ifNotExists: true, name: "by_color", collection: "cars", paths: [Path("color"), Path("specs", [.field("year")])])))
        #expect(try parse("DROP INDEX IF EXISTS by_color ON cars") == .dropIndex(DropIndexStatement(ifExists: true, name: "by_color", collection: "cars")))
        #expect(try parse("EXPLAIN SELECT * FROM cars") == .explain(.select(SelectStatement(projections: [.all], from: CollectionReference("cars")))))
    }

    /// Errors name the line, the column, the offending token and what was expected.
    @Test(arguments: [
        ("SELECT * cars", 1, 10, "'cars'", "',' or FROM"),
        ("SELECT * FROM", 1, 14, "end of input", "a collection name"),
        ("SELECT *\nFROM cars\nWHERE a = ", 3, 11, "end of input", "an expression"),
        ("SELECT * FROM cars WHERE a = 1 b", 1, 32, "'b'", "GROUP BY, HAVING, ORDER BY, LIMIT, OFFSET or end of input"),
        ("SELECT * FROM cars LIMIT 1 ORDER BY a", 1, 28, "keyword ORDER", "OFFSET or end of input"),
        ("FETCH x", 1, 1, "'FETCH'", "a statement (SELECT, INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM, SHOW, CREATE INDEX, DROP INDEX or EXPLAIN)"),
        ("INSERT INTO c DOCUMENTS :d", 1, 25, "parameter :d", "'(' before a document"),
        ("INSERT INTO c DOCUMENTS (:d) ON ID CONFLICT DO SOMETHING", 1, 48, "'SOMETHING'", "NOTHING, UPDATE, UPDATE_LOCAL_DIFF or FAIL"),
        ("UPDATE c WHERE x = 1", 1, 10, "keyword WHERE", "APPLY, SET or UNSET"),
        ("UPDATE c APPLY n ADD 1", 1, 18, "'ADD'", "INCREMENT BY, PN_INCREMENT BY or RESTART"),
        ("SELECT * FROM c WHERE a IS 3", 1, 28, "'3'", "NOT, NULL or MISSING"),
        ("SELECT * FROM c WHERE (a = 1", 1, 29, "end of input", "')'"),
        ("SELECT * FROM c WHERE a = 1 = 2", 1, 29, "'='", "GROUP BY, HAVING, ORDER BY, LIMIT, OFFSET or end of input"),
        ("SELECT * FROM c; SELECT 1 FROM d", 1, 18, "keyword SELECT", "end of input"),
        ("SELECT * FROM COLLECTION c (x BLOB)", 1, 31, "'BLOB'", "a field type (REGISTER, MAP, COUNTER, PN_COUNTER or ATTACHMENT)"),
        ("SELECT 1e999 FROM c", 1, 8, "'1e999'", "a number within the range of a double"),
        ("EXPLAIN EXPLAIN SELECT * FROM c", 1, 9, "'EXPLAIN'", "a statement (SELECT, INSERT, UPDATE, DELETE, EVICT, ALTER SYSTEM, SHOW, CREATE INDEX or DROP INDEX)"),
    ])
    func errors_arePositioned(_ text: String, _ line: Int, _ column: Int, _ found: String, _ expected: String) {
        do { _ = try DQL.parse(text); Issue.record("accepted \(text)") } catch {
            #expect(error.location.line == line, "\(error)")
            #expect(error.location.column == column, "\(error)")
            #expect(error.found == found, "\(error)")
            #expect(error.expected == expected, "\(error)")
        }
    }

    @Test func semicolon_optionalAtTheEndOnly() throws {
        #expect(try parse("SELECT * FROM c;") == parse("SELECT * FROM c"))
        #expect(try parse("SHOW ALL ; -- done") == .system(.show(nil)))
        #expect(throws: DQLSyntaxError.self) { try parse("SELECT * FROM c;;") }
        #expect(throws: DQLSyntaxError.self) { try parse("SELECT * FROM c; SELECT * FROM d") }
    }

    @Test func errors_shortenLongTokens() {
        do { _ = try DQL.parse("SELECT * FROM c WHERE a = 1 '" + String(repeating: "é", count: 500) + "'"); Issue.record("accepted") } catch {
            #expect(error.found == "string '" + String(repeating: "é", count: 40) + "...'")
        }
    }

    @Test func limits_depthAndSize() {
        let deep = "SELECT * FROM c WHERE " + String(repeating: "(", count: 500) + "1" + String(repeating: ")", count: 500)
        #expect(throws: DQLSyntaxError.self) { try DQL.parse(deep) }
        let chain = "SELECT * FROM c WHERE " + Array(repeating: "a", count: 5000).joined(separator: " + ") + " = 1"
        #expect(throws: DQLSyntaxError.self) { try DQL.parse(chain) }
        let nots = "SELECT * FROM c WHERE " + String(repeating: "NOT ", count: 1000) + "a"
        #expect(throws: DQLSyntaxError.self) { try DQL.parse(nots) }
        let big = "SELECT * FROM c WHERE a = '" + String(repeating: "x", count: 300_000) + "'"
        #expect(throws: DQLSyntaxError.self) { try DQL.parse(big) }
        #expect(throws: Never.self) { try DQL.parse("SELECT * FROM c WHERE " + String(repeating: "(", count: 40) + "1" + String(repeating: ")", count: 40)) }
    }
}
