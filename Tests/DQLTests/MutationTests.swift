import Testing
import Values
@testable import DQL

@Suite struct MutationTests {
    func update(_ text: String, strict: Bool = true) throws -> UpdatePlan {
        guard case .update(let u) = try DQL.parse(text) else { throw DQLEvaluationError.invalidStatement("not an update") }
        return try UpdatePlan(u, context: EvaluationContext(arguments: ["v": 5], strictMode: strict))
    }

    func insert(_ text: String, _ args: [String: Value] = [:]) throws -> InsertPlan {
        guard case .insert(let i) = try DQL.parse(text) else { throw DQLEvaluationError.invalidStatement("not an insert") }
        return try InsertPlan(i, context: EvaluationContext(arguments: args))
    }

    @Test func insert_evaluatesDocumentsAndPolicy() throws {
        let p = try insert("INSERT INTO COLLECTION cars (p MAP) INITIAL DOCUMENTS (:d), ({'_id': {'a': 1}, 'n': 1 + 1}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF",
                           ["d": ["_id": "x", "color": "red"]])
        #expect(p.documents == [["_id": "x", "color": "red"], ["_id": ["a": 1], "n": 2]])
        #expect(p.initial && p.policy == .doUpdateLocalDiff && p.collection == "cars")
        #expect(p.declarations.type(of: [.field("p")]) == .map)
        #expect(try insert("INSERT INTO c DOCUMENTS (:d)", ["d": [:]]).policy == .fail)
    }

    @Test func insert_rejectsBadDocuments() throws {
        #expect(throws: DQLEvaluationError.notAnObject("INSERT document 1")) { try insert("INSERT INTO c DOCUMENTS (1)") }
        #expect(throws: DQLEvaluationError.invalidStatement("INSERT document 1: _id must be a string or an object, not number")) {
            try insert("INSERT INTO c DOCUMENTS ({'_id': 3})")
        }
        let big = Value.string(String(repeating: "x", count: documentLimitBytes))
        #expect(throws: DQLEvaluationError.self) { try insert("INSERT INTO c DOCUMENTS ({'b': :b})", ["b": big]) }
        let warn = Value.string(String(repeating: "x", count: documentWarningBytes))
        #expect(try insert("INSERT INTO c DOCUMENTS ({'b': :b})", ["b": warn]).warnings.count == 1)
    }

    @Test func update_operations() throws {
        let plan = try update("UPDATE COLLECTION c (m MAP, n COUNTER) APPLY n INCREMENT BY :v, k RESTART WITH 2 SET m.x = price * 2, t = nope UNSET old")
        let doc: Value = ["_id": "1", "price": 10, "n": 1, "old": true, "t": "gone", "m": ["y": 1]]
        let ops = try plan.operations(for: doc)
        #expect(ops == [
            .increment([.field("n")], amount: 5, legacy: false), .restart([.field("k")], value: 2),
            .set([.field("m"), .field("x")], 20), .unset([.field("t")]), .unset([.field("old")]),
        ])
    }

    @Test func strictMode_requiresMapDeclarationForDotPaths() throws {
        #expect(throws: DQLEvaluationError.self) { try update("UPDATE c SET a.b = 1") }
        #expect(throws: Never.self) { try update("UPDATE COLLECTION c (a MAP) SET a.b = 1") }
        #expect(throws: Never.self) { try update("UPDATE c SET a.b = 1", strict: false) }
        #expect(throws: DQLEvaluationError.self) { try update("UPDATE COLLECTION c (a REGISTER) SET a.b = 1", strict: false) }
        #expect(throws: Never.self) { try update("UPDATE c SET a = {'b': 1}") }
    }

    @Test func update_rejectsAmbiguousOrIllegalPaths() throws {
        #expect(throws: DQLEvaluationError.invalidStatement("_id cannot be changed (_id)")) { try update("UPDATE c SET _id = 'x'") }
        #expect(throws: DQLEvaluationError.invalidStatement("a is changed twice in one UPDATE")) { try update("UPDATE c SET a = 1 UNSET a") }
        #expect(throws: DQLEvaluationError.self) { try update("UPDATE c SET a = 1, a.b = 2", strict: false) }
        #expect(throws: DQLEvaluationError.self) { try update("UPDATE c SET tags[0] = 'x'") }
        #expect(throws: DQLEvaluationError.invalidStatement("n is declared MAP; APPLY needs a COUNTER")) { try update("UPDATE COLLECTION c (n MAP) APPLY n INCREMENT BY 1") }
        #expect(throws: DQLEvaluationError.invalidStatement("INCREMENT BY needs a number for n")) {
            try update("UPDATE c APPLY n INCREMENT BY 'x'").operations(for: [:])
        }
    }

    @Test func systemSettings() throws {
        #expect(try SystemSetting.validate(name: "dql_strict_mode", value: false) == (.strictMode, false))
        #expect(try SystemSetting.validate(name: "DQL_STRICT_MODE", value: "TRUE") == (.strictMode, true))
        #expect(throws: DQLEvaluationError.self) { try SystemSetting.validate(name: "DQL_STRICT_MODE", value: 1) }
        #expect(throws: DQLEvaluationError.self) { try SystemSetting.validate(name: "NOPE", value: true) }
    }
}

@Suite struct PreparedStatementTests {
    let context = EvaluationContext(arguments: ["id": "a", "d": ["_id": "x"]])

    @Test func prepare_everyStatementKind() throws {
        guard case .select(let q, let p) = try PreparedStatement.prepare("SELECT * FROM cars WHERE _id = :id", context: context) else { Issue.record(); return }
        #expect(try q.run(Fixture.cars) == [Fixture.cars[0]])
        #expect(p.parameters == [.text("cars"), .jsonb("\"a\"")])
        guard case .insert(let i) = try PreparedStatement.prepare("INSERT INTO cars DOCUMENTS (:d)", context: context) else { Issue.record(); return }
        #expect(i.documents == [["_id": "x"]])
        guard case .update(let u, let s) = try PreparedStatement.prepare("UPDATE cars SET sold = true WHERE _id = :id", context: context) else { Issue.record(); return }
        #expect(try u.operations(for: Fixture.cars[0]) == [.set([.field("sold")], true)])
        #expect(s.pushedConditions.count == 1)
        guard case .delete(let d) = try PreparedStatement.prepare("DELETE FROM cars WHERE lower(make) = 'ford'", context: context) else { Issue.record(); return }
        #expect(try d.memoryQuery.run(Fixture.cars).count == 2)
        guard case .evict = try PreparedStatement.prepare("EVICT FROM cars", context: context) else { Issue.record(); return }
        guard case .setSetting(.strictMode, false) = try PreparedStatement.prepare("ALTER SYSTEM SET dql_strict_mode = false", context: context) else { Issue.record(); return }
        guard case .resetSetting(nil) = try PreparedStatement.prepare("ALTER SYSTEM RESET ALL", context: context) else { Issue.record(); return }
        guard case .showSetting(.strictMode) = try PreparedStatement.prepare("SHOW DQL_STRICT_MODE", context: context) else { Issue.record(); return }
        guard case .createIndex(_, let sql) = try PreparedStatement.prepare("CREATE INDEX i ON cars (a)", context: context) else { Issue.record(); return }
        #expect(sql.hasPrefix("CREATE INDEX \"dql_cars_i_"))
        guard case .explain(let text) = try PreparedStatement.prepare("EXPLAIN DELETE FROM cars WHERE a = 1", context: context) else { Issue.record(); return }
        #expect(text.hasPrefix("DELETE: documents chosen by\nPostgreSQL:"))
        #expect(throws: DQLEvaluationError.self) { try PreparedStatement.prepare("SHOW NOPE", context: context) }
        #expect(throws: DQLSyntaxError.self) { try PreparedStatement.prepare("SHOW", context: context) }
    }
}
