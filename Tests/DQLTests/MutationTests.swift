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

    @Test func update_operationsAndInMemoryApply() throws {
        let plan = try update("UPDATE COLLECTION c (m MAP, n COUNTER) APPLY n INCREMENT BY :v, k RESTART WITH 2 SET m.x = price * 2, t = nope UNSET old")
        let doc: Value = ["_id": "1", "price": 10, "n": 1, "old": true, "t": "gone", "m": ["y": 1]]
        let ops = try plan.operations(for: doc)
        #expect(ops == [
            .increment([.field("n")], amount: 5, legacy: false), .restart([.field("k")], value: 2),
            .set([.field("m"), .field("x")], 20), .unset([.field("t")]), .unset([.field("old")]),
        ])
        #expect(try UpdatePlan.apply(ops, to: doc) == ["_id": "1", "price": 10, "n": 6, "k": 2, "m": ["x": 20, "y": 1]])
        #expect(throws: DQLEvaluationError.numericOverflow("9223372036854775807 + 5")) {
            try UpdatePlan.apply([.increment([.field("n")], amount: 5, legacy: true)], to: ["n": .int(Int64.max)])
        }
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

@Suite struct InsertConflictTests {
    func plan(_ policy: String, strict: Bool = true, declare: String = "") throws -> InsertPlan {
        guard case .insert(let i) = try DQL.parse("INSERT INTO \(declare.isEmpty ? "c" : "COLLECTION c (\(declare))") DOCUMENTS (:d) ON ID CONFLICT \(policy)") else {
            throw DQLEvaluationError.invalidStatement("not an insert")
        }
        return try InsertPlan(i, context: EvaluationContext(arguments: ["d": ["_id": "x"]], strictMode: strict))
    }

    let existing: Value = ["_id": "x", "a": 1, "m": ["p": 1, "q": 2], "keep": true]
    let incoming: [String: Value] = ["_id": "x", "a": 1, "m": ["p": 1, "q": 3], "n": .double(1.0)]

    @Test func doNothingAndFail_mutateNothing() throws {
        #expect(try plan("DO NOTHING").conflictOperations(incoming: incoming, existing: existing).isEmpty)
        #expect(try plan("FAIL").conflictOperations(incoming: incoming, existing: existing).isEmpty)
    }

    @Test func doUpdate_writesEveryGivenField() throws {
        #expect(try plan("DO UPDATE").conflictOperations(incoming: incoming, existing: existing) == [
            .set([.field("a")], 1), .set([.field("m")], ["p": 1, "q": 3]), .set([.field("n")], 1.0),
        ])
    }

    @Test func doUpdateLocalDiff_writesOnlyChanges() throws {
        #expect(try plan("DO UPDATE_LOCAL_DIFF").conflictOperations(incoming: incoming, existing: existing) == [
            .set([.field("m")], ["p": 1, "q": 3]), .set([.field("n")], 1.0),
        ])
        // Identical values: nothing mutated.
        #expect(try plan("DO UPDATE_LOCAL_DIFF").conflictOperations(incoming: ["_id": "x", "a": 1], existing: existing).isEmpty)
        // 1 and 1.0 are different values to store.
        #expect(try plan("DO UPDATE_LOCAL_DIFF").conflictOperations(incoming: ["a": 1.0], existing: existing) == [.set([.field("a")], 1.0)])
    }

    @Test func maps_areDescendedInto() throws {
        #expect(try plan("DO UPDATE_LOCAL_DIFF", declare: "m MAP").conflictOperations(incoming: incoming, existing: existing) == [
            .set([.field("m"), .field("q")], 3), .set([.field("n")], 1.0),
        ])
        #expect(try plan("DO UPDATE_LOCAL_DIFF", strict: false).conflictOperations(incoming: incoming, existing: existing) == [
            .set([.field("m"), .field("q")], 3), .set([.field("n")], 1.0),
        ])
        #expect(try plan("DO UPDATE", strict: false).conflictOperations(incoming: ["m": [:]], existing: ["_id": "x"]) == [.set([.field("m")], [:])])
    }
}
