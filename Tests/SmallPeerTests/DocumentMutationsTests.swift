// The merge rules shared by the server store and the small peer (Sources/DQL/DocumentMutations.swift).
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
        #expect(try insert.apply([["_id": "a", "v": 1]], to: &doc, types: insert.crdtTypes, replica: &replica))
        // FAIL on a live document: a typed conflict.
        #expect(throws: DocumentMutationError.conflict(collection: "c", id: "a")) {
            var d = doc
            _ = try insert.apply([["_id": "a", "v": 2]], to: &d, types: insert.crdtTypes, replica: &replica)
        }
        let nothing = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 2}) ON ID CONFLICT DO NOTHING")
        #expect(try !nothing.apply([["_id": "a", "v": 2]], to: &doc, types: nothing.crdtTypes, replica: &replica))
        #expect(doc.materialize()?["v"] == 1)
        let diff = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF")
        #expect(try !diff.apply([["_id": "a", "v": 1]], to: &doc, types: diff.crdtTypes, replica: &replica))
        let update = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'a', 'v': 1}) ON ID CONFLICT DO UPDATE")
        #expect(try update.apply([["_id": "a", "v": 1]], to: &doc, types: update.crdtTypes, replica: &replica))  // equal values still count
        // INITIAL writes at time zero: it never overrides a real write.
        let initial = try Self.insertPlan("INSERT INTO c INITIAL DOCUMENTS ({'_id': 'a', 'v': 7})")
        _ = try initial.apply([["_id": "a", "v": 7]], to: &doc, types: initial.crdtTypes, replica: &replica)
        #expect(doc.materialize()?["v"] == 1)
    }

    @Test func insertGroups_groupByIDAndGenerateIDs() throws {
        let plan = try Self.insertPlan("INSERT INTO c DOCUMENTS ({'_id': 'x', 'n': 1}), ({'n': 2}), ({'_id': 'x', 'n': 3})")
        var counter = 0
        let groups = InsertGroups(plan.documents) { counter += 1; return .string("gen\(counter)") }
        #expect(groups.order == ["x", "gen1"])
        #expect(groups.supplied == ["x"] && groups.generated == ["gen1"])
        #expect(groups.fieldsByID["x"]?.map { $0["n"] } == [1, 3])
        #expect(groups.fieldsByID["gen1"]?.first?["_id"] == "gen1")
    }

    /// Site 1 created document `x` as `base`; site 2 then ran `UPDATE <collection> SET <theirs>` on
    /// it, unseen by site 1; later, site 1 runs `INSERT INTO <collection> DOCUMENTS (:d) ON ID
    /// CONFLICT <policy>` and then receives site 2's change. A field the policy wrote is newer than
    /// site 2's and wins; a field it left alone shows site 2's value. So the merged value shows
    /// exactly which fields each policy writes.
    static func concurrently(_ policy: String, _ incoming: Value, collection: String = "COLLECTION c (m MAP)", strict: Bool = true,
                             theirs: String = "a = 5, m.p = 5, keep = false") throws -> (changed: Bool, merged: Value?) {
        let base: Value = ["_id": "x", "a": 1, "m": ["p": 1, "q": 2], "keep": true]
        let create = try insertPlan("INSERT INTO \(collection) DOCUMENTS (:d)", strict: strict, ["d": base])
        var site1 = Replica(site: SiteID(1), wallClock: { 1_000 })
        var mine = try Document(id: "x")
        _ = try create.apply(create.documents, to: &mine, types: create.crdtTypes, replica: &site1)
        var other = mine
        var site2 = Replica(site: SiteID(2), wallClock: { 2_000 })
        _ = try updatePlan("UPDATE \(collection) SET \(theirs)", strict: strict).apply(to: &other, current: base, replica: &site2)
        let change = other.delta(since: mine.versionVector)
        let plan = try insertPlan("INSERT INTO \(collection) DOCUMENTS (:d) ON ID CONFLICT \(policy)", strict: strict, ["d": incoming])
        var later = Replica(site: SiteID(1), wallClock: { 3_000 })
        let changed = try plan.apply(plan.documents, to: &mine, types: plan.crdtTypes, replica: &later)
        _ = try mine.merge(change)
        return (changed, mine.materialize())
    }

    static let incoming: Value = ["_id": "x", "a": 1, "m": ["p": 1, "q": 3], "n": .double(1.0)]

    @Test func doUpdate_writesEveryGivenField() throws {
        let r = try Self.concurrently("DO UPDATE", Self.incoming)
        #expect(r.changed)
        #expect(r.merged == ["_id": "x", "a": 1, "m": ["p": 1, "q": 3], "n": .double(1.0), "keep": false])
    }

    @Test func doUpdateLocalDiff_writesOnlyWhatDiffers_exactly_andMemberByMemberInAMap() throws {
        let r = try Self.concurrently("DO UPDATE_LOCAL_DIFF", Self.incoming)
        #expect(r.changed)
        #expect(r.merged == ["_id": "x", "a": 5, "m": ["p": 5, "q": 3], "n": .double(1.0), "keep": false])
        // Identical values: nothing written, not mutated.
        let same = try Self.concurrently("DO UPDATE_LOCAL_DIFF", ["_id": "x", "a": 1])
        #expect(!same.changed && same.merged == ["_id": "x", "a": 5, "m": ["p": 5, "q": 2], "keep": false])
        // 1 and 1.0 are different values to store.
        let double = try Self.concurrently("DO UPDATE_LOCAL_DIFF", ["_id": "x", "a": .double(1.0)])
        #expect(double.changed && double.merged?["a"] == .double(1.0))
        // Strict mode off: an object is a MAP without a declaration, compared member by member.
        let loose = try Self.concurrently("DO UPDATE_LOCAL_DIFF", Self.incoming, collection: "c", strict: false)
        #expect(loose.merged == ["_id": "x", "a": 5, "m": ["p": 5, "q": 3], "n": .double(1.0), "keep": false])
        // Strict mode, no MAP declared: the object is one REGISTER, written whole when it differs.
        let register = try Self.concurrently("DO UPDATE_LOCAL_DIFF", Self.incoming, collection: "c",
                                             theirs: "a = 5, m = {'p': 5, 'q': 2}, keep = false")
        #expect(register.merged == ["_id": "x", "a": 5, "m": ["p": 1, "q": 3], "n": .double(1.0), "keep": false])
    }

    @Test func doNothingAndFail_writeNothing() throws {
        let r = try Self.concurrently("DO NOTHING", Self.incoming)
        #expect(!r.changed && r.merged == ["_id": "x", "a": 5, "m": ["p": 5, "q": 2], "keep": false])
        #expect(throws: DocumentMutationError.conflict(collection: "c", id: "x")) { try Self.concurrently("FAIL", Self.incoming) }
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
