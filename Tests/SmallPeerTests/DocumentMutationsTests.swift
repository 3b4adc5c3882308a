// The pure mutation code shared by the server store and the small peer (Sources/DQL/DocumentMutations.swift).
import CRDT
import DQL
import Testing
import Values

@Suite("DQL document mutations (shared by Store and SmallPeer)")
struct DocumentMutationsTests {
    static func insertPlan(_ text: String, strict: Bool = true, _ args: [String: Value] = [:]) throws -> InsertPlan {
        guard case .insert(let i) = try DQL.parse(text) else { throw TestFailure("not an INSERT") }
        return try InsertPlan(i, context: EvaluationContext(arguments: args, strictMode: strict))
    }

    static func updatePlan(_ text: String, strict: Bool = true, _ args: [String: Value] = [:]) throws -> UpdatePlan {
        guard case .update(let u) = try DQL.parse(text) else { throw TestFailure("not an UPDATE") }
        return try UpdatePlan(u, context: EvaluationContext(arguments: args, strictMode: strict))
    }

    @Test func insertPolicies_andMutatedFlags() throws {
        var replica = Replica(site: SiteID(9), wallClock: { 1_000 })
        var doc = try Document(id: "a")
        let insert = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1})")
        #expect(try insert.apply([["_id": "a", "v": 1]], to: &doc, strictMode: true, replica: &replica))
        // FAIL on a live document: a typed conflict.
        #expect(throws: DocumentMutationError.conflict(collection: "c", id: "a")) {
            var d = doc
            _ = try insert.apply([["_id": "a", "v": 2]], to: &d, strictMode: true, replica: &replica)
        }
        let nothing = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 2}) ON ID CONFLICT DO NOTHING")
        #expect(try !nothing.apply([["_id": "a", "v": 2]], to: &doc, strictMode: true, replica: &replica))
        #expect(doc.materialize()?["v"] == 1)
        let diff = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
        #expect(try !diff.apply([["_id": "a", "v": 1]], to: &doc, strictMode: true, replica: &replica))
        let update = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1}) ON ID CONFLICT DO UPDATE")
        #expect(try update.apply([["_id": "a", "v": 1]], to: &doc, strictMode: true, replica: &replica))  // equal values still count
        // INITIAL writes at time zero: it never overrides a real write.
        let initial = try Self.insertPlan("INSERT INTO c INITIAL DOCUMENTS ({'_id': 'a', 'v': 7})")
        _ = try initial.apply([["_id": "a", "v": 7]], to: &doc, strictMode: true, replica: &replica)
        #expect(doc.materialize()?["v"] == 1)
    }

    @Test func documentsByID_groupsAndGeneratesIDs() throws {
        let plan = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'x', 'n': 1}), ({'n': 2}), ({'_id': 'x', 'n': 3})")
        var counter = 0
        let grouped = plan.documentsByID { counter += 1; return .string("gen\(counter)") }
        #expect(grouped.map(\.id) == ["x", "gen1"])
        #expect(grouped[0].versions.map { $0["n"] } == [1, 3])
        #expect(grouped[1].versions.first?["_id"] == "gen1")
    }

    @Test func update_appliesOperations_typedErrors_andTheSizeLimit() throws {
        var replica = Replica(site: SiteID(9), wallClock: { 1_000 })
        var doc = try Document(id: "a")
        _ = try doc.upsert(["_id": "a", "v": 1, "s": "x"], replica: &replica)
        let plan = try Self.updatePlan("UPDATE c APPLY hits INCREMENT BY 2 SET v = v + 1 UNSET s WHERE _id = 'a'")
        let current = try #require(doc.materialize())
        let outcome = try plan.apply(to: &doc, current: current, replica: &replica)
        #expect(outcome.changed && outcome.warning == nil)
        #expect(doc.materialize() == ["_id": "a", "v": 2, "hits": 2])
        let bad = try Self.updatePlan("UPDATE c APPLY hits INCREMENT BY 'x' WHERE _id = 'a'")
        #expect(throws: DocumentMutationError.self) { _ = try bad.apply(to: &doc, current: current, replica: &replica) }
        let big = try Self.updatePlan("UPDATE c SET blob = :b WHERE _id = 'a'", ["b": .string(String(repeating: "x", count: 6_000_000))])
        #expect { _ = try big.apply(to: &doc, current: current, replica: &replica) } throws: { error in
            if case DocumentMutationError.tooLarge = error { true } else { false }
        }
    }

    @Test func declarations_mapToCRDTTypes() throws {
        let plan = try Self.updatePlan("UPDATE COLLECTION c (m MAP, n COUNTER, p PN_COUNTER, r REGISTER) SET r = 1", strict: false)
        let t = plan.declarations.crdt(strictMode: false)
        #expect(!t.strict)
        let expected: [FieldPath: CRDT.FieldType] = ["m": .map, "n": .counter, "p": .counter, "r": .register]
        #expect(t.declared == expected)
    }
}
