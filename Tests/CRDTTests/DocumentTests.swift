import Testing
import Values
@testable import CRDT

@Suite struct DocumentLifecycleTests {
    @Test func idMustBeAStringOrAnObjectAndIsImmutable() throws {
        #expect(throws: CRDTError.self) { try Document(id: 5) }
        var r = makeReplica(1)
        var d = try Document(id: ["a": 1, "b": "x"])
        #expect(try d.upsert(["_id": ["a": 1, "b": "x"], "v": 1], replica: &r))
        #expect(d.materialize() == ["_id": ["a": 1, "b": "x"], "v": 1])
        #expect(throws: CRDTError.idMismatch) { try d.upsert(["_id": "other"], replica: &r) }
        #expect(throws: CRDTError.self) { try d.set("_id", to: "x", replica: &r) }
        #expect(throws: CRDTError.emptyPath) { try d.set(FieldPath([]), to: 1, replica: &r) }
    }

    @Test func operationsOnAMissingDocumentThrow() throws {
        var r = makeReplica(1)
        var d = try Document(id: "d")
        #expect(d.materialize() == nil && !d.exists)
        #expect(throws: CRDTError.documentDoesNotExist) { try d.set("a", to: 1, replica: &r) }
        #expect(d.delete(replica: &r) == false)
    }

    @Test func deleteSyncsAndALaterInsertRecreatesTheDocument() throws {
        var p = try Pair(initial: ["x": 1, "y": 2])
        let deleted = p.a.delete(replica: &p.ra)
        #expect(deleted)
        let change = try send(p.a, to: &p.b)
        #expect(change.existenceChanged)
        #expect(p.b.materialize() == nil)
        p.clock.advance(5)
        #expect(try p.b.upsert(["z": 3], replica: &p.rb))
        try p.sync()
        #expect(p.a.materialize() == ["_id": "doc", "z": 3])
        #expect(p.a.encode() == p.b.encode())
    }

    @Test func aWriteConcurrentWithDeleteAndStampedLaterSurvivesAlone() throws {
        var p = try Pair(initial: ["x": 1, "y": 2])
        _ = p.a.delete(replica: &p.ra)
        p.clock.advance(1)
        _ = try p.b.set("y", to: 20, replica: &p.rb)
        try p.sync()
        #expect(p.a.materialize() == ["_id": "doc", "y": 20])
        #expect(p.b.materialize() == ["_id": "doc", "y": 20])
    }

    @Test func aConcurrentWriteStampedBeforeTheNewestWriteTheDeleterSawIsRemoved() throws {
        var p = try Pair(initial: ["x": 1, "y": 2])
        _ = try p.b.set("y", to: 20, replica: &p.rb)  // a never sees this before deleting
        p.clock.advance(1)
        _ = try p.a.set("x", to: 5, replica: &p.ra)  // newer than b's write
        _ = p.a.delete(replica: &p.ra)  // barrier = a's newest write, above b's stamp
        try p.sync()
        #expect(p.a.materialize() == nil && p.b.materialize() == nil)
        #expect(p.a.encode() == p.b.encode())
    }

    @Test func initialWritesLoseToAnyRealWriteInEitherOrder() throws {
        let clock = ManualClock()
        var ra = makeReplica(0xA, clock: clock), rb = makeReplica(0xB, clock: clock)
        var a = try Document(id: "settings"), b = try Document(id: "settings")
        _ = try b.upsert(["theme": "dark"], replica: &rb)  // real write, earlier wall time
        clock.advance(60_000)
        _ = try a.insertInitial(["theme": "light", "lang": "en"], replica: &ra)  // default data, later
        try syncBoth(&a, &b)
        #expect(a.materialize() == ["_id": "settings", "theme": "dark", "lang": "en"])
        #expect(a.encode() == b.encode())
        // An INITIAL insert never overrides, even locally.
        #expect(try a.insertInitial(["theme": "blue"], replica: &ra) == false)
        #expect(a.value(at: "theme") == "dark")
        // And a deleted document stays deleted.
        _ = a.delete(replica: &ra)
        _ = try a.insertInitial(["theme": "light"], replica: &ra)
        #expect(a.materialize() == nil)
    }

    @Test func upsertDoUpdateWritesEveryFieldAndLocalDiffOnlyChangedOnes() throws {
        var r = makeReplica(1)
        var d = try Document(id: "u")
        #expect(try d.upsert(["a": 1, "b": ["c": 2]], types: .nonStrict, replica: &r))
        let vv = d.versionVector
        #expect(try d.upsert(["a": 1, "b": ["c": 2]], mode: .updateLocalDiff, types: .nonStrict, replica: &r) == false)
        #expect(d.versionVector == vv)  // nothing was written
        let delta = d.delta(since: vv)
        #expect(delta.isEmpty)
        #expect(try d.upsert(["a": 1], mode: .update, types: .nonStrict, replica: &r) == false)
        #expect(d.versionVector != vv)  // DO UPDATE writes even an equal value
        #expect(try d.upsert(["a": 1, "b": ["c": 3]], mode: .updateLocalDiff, types: .nonStrict, replica: &r))
        let diff = d.delta(since: d.versionVector)
        #expect(diff.isEmpty)
    }

    @Test func strictAndNonStrictTypingOfObjects() throws {
        var r = makeReplica(1)
        let value: [String: Value] = ["address": ["city": "Oslo"], "meta": ["a": 1]]
        var strict = try Document(id: "s")
        _ = try strict.upsert(value, types: TypeDeclarations(strict: true, declared: [FieldPath(["meta"]): .map]), replica: &r)
        #expect(strict.visibleKind(at: "address") == .other)  // REGISTER
        #expect(strict.visibleKind(at: "meta") == .map)
        #expect(throws: CRDTError.notAMap(FieldPath(["address"]))) {
            try strict.set("address.zip", to: "0150", types: .strict, replica: &r)
        }
        var loose = try Document(id: "n")
        _ = try loose.upsert(value, types: .nonStrict, replica: &r)
        #expect(loose.visibleKind(at: "address") == .map)
        #expect(try loose.set("address.zip", to: "0150", types: .nonStrict, replica: &r))
        #expect(try loose.set("new.deep.path", to: true, types: .nonStrict, replica: &r))
        #expect(loose.value(at: "address") == ["city": "Oslo", "zip": "0150"])
        #expect(loose.value(at: "new") == ["deep": ["path": true]])
    }

    @Test func nullIsKeptDistinctFromMissing() throws {
        var r = makeReplica(1)
        var d = try Document(id: "n")
        _ = try d.upsert(["a": nil], replica: &r)
        #expect(d.value(at: "a") == .null)
        #expect(d.value(at: "b") == nil)
        #expect(d.materialize() == ["_id": "n", "a": nil])
    }

    @Test func aPeerWithAFastClockDoesNotFreezeLocalWrites() throws {
        let clock = ManualClock()
        var fast = makeReplica(0xF, clock: ManualClock(clock.now + 365 * 86_400_000))
        var local = makeReplica(0x1, clock: clock)
        var a = try Document(id: "d"), b = try Document(id: "d")
        _ = try a.upsert(["x": "future"], replica: &fast)
        local.observe(a.delta(since: b.versionVector))
        _ = try send(a, to: &b)
        #expect(local.clock.last.physicalMillis <= clock.now + HybridLogicalClock.defaultMaxForwardDriftMillis)
        #expect(try b.set("x", to: "now", replica: &local))
        #expect(b.value(at: "x") == "now")
        _ = try send(b, to: &a)
        #expect(a.value(at: "x") == "now")
    }
}

@Suite struct LimitTests {
    @Test func writesThatWouldNestTooDeepAreRejectedSoEveryStateDecodes() throws {
        var r = makeReplica(1)
        var d = try Document(id: "deep")
        _ = try d.upsert(["a": 1], types: .nonStrict, replica: &r)
        let deepPath = FieldPath((0..<200).map { "k\($0)" })
        #expect(throws: CRDTError.tooDeep(deepPath)) { try d.set(deepPath, to: 1, types: .nonStrict, replica: &r) }
        var deepValue: Value = 1
        for _ in 0..<200 { deepValue = [deepValue] }
        #expect(throws: CRDTError.self) { try d.set("a", to: deepValue, replica: &r) }
        #expect(throws: CRDTError.self) { try d.upsert(["b": deepValue], replica: &r) }
        // The deepest allowed write still round-trips.
        let okPath = FieldPath((0..<64).map { "k\($0)" })
        var okValue: Value = 1
        for _ in 0..<(Document.maxNestingDepth - 64) { okValue = [okValue] }
        _ = try d.set(okPath, to: okValue, types: .nonStrict, replica: &r)
        #expect(try Document.decode(d.encode()) == d)
    }
}
