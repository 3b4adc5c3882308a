import Testing
import Values
@testable import CRDT

/// Sends everything `from` has that `to` lacks (through the wire encoding).
func send(_ from: Document, to: inout Document) throws -> ChangeSet {
    let bytes = from.delta(since: to.versionVector).encode()
    return try to.merge(try Delta.decode(bytes))
}

func syncBoth(_ a: inout Document, _ b: inout Document) throws {
    _ = try send(a, to: &b)
    _ = try send(b, to: &a)
}

/// Two replicas of one document with their own sites and a shared manual wall clock.
struct Pair {
    let clock = ManualClock()
    var ra: Replica
    var rb: Replica
    var a: Document
    var b: Document

    init(types: TypeDeclarations = .nonStrict, initial: [String: Value] = ["x": 1]) throws {
        ra = makeReplica(0xA, clock: clock)
        rb = makeReplica(0xB, clock: clock)
        a = try Document(id: "doc")
        _ = try a.upsert(initial, types: types, replica: &ra)
        b = try Document(id: "doc")
        _ = try send(a, to: &b)
        clock.advance(10)
    }

    mutating func sync() throws { try syncBoth(&a, &b) }
}

@Suite struct RegisterTests {
    @Test func laterWriteWinsOnBothReplicas() throws {
        var p = try Pair()
        _ = try p.a.set("x", to: "from a", replica: &p.ra)
        p.clock.advance(5)
        _ = try p.b.set("x", to: "from b", replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "x") == "from b")
        #expect(p.a.encode() == p.b.encode())
    }

    @Test func equalTimestampsAreBrokenBySiteID() throws {
        var p = try Pair()
        // Same wall time, no communication: identical stamps, the higher site id (0xB) wins.
        _ = try p.a.set("x", to: "a", replica: &p.ra)
        _ = try p.b.set("x", to: "b", replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "x") == "b" && p.b.value(at: "x") == "b")
    }

    @Test func arraysAndObjectsAreOneUnitInStrictMode() throws {
        var p = try Pair(types: .strict)
        _ = try p.a.set("tags", to: ["x", "y"], replica: &p.ra)
        _ = try p.b.set("address", to: ["city": "Oslo", "zip": "0150"], replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "tags") == ["x", "y"])
        #expect(p.b.value(at: "address") == ["city": "Oslo", "zip": "0150"])
        #expect(throws: CRDTError.notAMap(FieldPath(["address"]))) {
            try p.a.set("address.city", to: "Bergen", types: .strict, replica: &p.ra)
        }
    }

    @Test func overwritingAMillionTimesDoesNotGrowTheDocument() throws {
        var p = try Pair()
        _ = try p.a.set("x", to: 0, replica: &p.ra)
        let size = p.a.encode().count
        for i in 1...20_000 {
            _ = try p.a.set("x", to: .int(Int64(i % 10)), replica: &p.ra)
        }
        // Same shape of metadata; only the version-vector offset digits may differ by a few bytes.
        #expect(p.a.encode().count <= size + 4)
    }
}

@Suite struct MapTests {
    @Test func concurrentWritesToDifferentKeysBothSurvive() throws {
        var p = try Pair(initial: ["m": ["k": 0]])
        _ = try p.a.set("m.left", to: 1, replica: &p.ra)
        _ = try p.b.set("m.right", to: 2, replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "m") == ["k": 0, "left": 1, "right": 2])
        #expect(p.a.encode() == p.b.encode())
    }

    @Test func removalOnlyRemovesWhatItSaw() throws {
        var p = try Pair(initial: ["m": ["k": 0, "j": 1]])
        _ = try p.a.unset("m", replica: &p.ra)
        p.clock.advance(1)
        _ = try p.b.set("m.new", to: 5, replica: &p.rb)  // concurrent, later
        try p.sync()
        #expect(p.a.value(at: "m") == ["new": 5])
        #expect(p.b.value(at: "m") == ["new": 5])
        #expect(p.a.encode() == p.b.encode())
    }

    @Test func unsetOfAFieldAndOfAWholeSubtree() throws {
        var p = try Pair(initial: ["m": ["k": 0, "n": ["deep": true]]])
        #expect(try p.a.unset("m.n.deep", replica: &p.ra))
        #expect(p.a.value(at: "m") == ["k": 0, "n": [:]])
        #expect(try p.a.unset("m", replica: &p.ra))
        #expect(p.a.value(at: "m") == nil)
        #expect(try p.a.unset("m", replica: &p.ra) == false)
        try p.sync()
        #expect(p.b.materialize() == ["_id": "doc"])
    }

    @Test func typeConflictMapVersusArrayLaterWriteDecides() throws {
        // docs/CRDT.md example: A writes `tags` as an array (REGISTER), B writes `tags.color` (MAP).
        for bIsLater in [false, true] {
            var p = try Pair()
            if bIsLater {
                _ = try p.a.set("tags", to: ["red"], replica: &p.ra)
                p.clock.advance(1)
                _ = try p.b.set("tags.color", to: "blue", types: .nonStrict, replica: &p.rb)
            } else {
                _ = try p.b.set("tags.color", to: "blue", types: .nonStrict, replica: &p.rb)
                p.clock.advance(1)
                _ = try p.a.set("tags", to: ["red"], replica: &p.ra)
            }
            try p.sync()
            let expected: Value = bIsLater ? ["color": "blue"] : ["red"]
            #expect(p.a.value(at: "tags") == expected)
            #expect(p.b.value(at: "tags") == expected)
            #expect(p.a.encode() == p.b.encode())
        }
    }
}

@Suite struct CounterTests {
    @Test func concurrentIncrementsAndDecrementsAddUp() throws {
        var p = try Pair()
        _ = try p.a.increment("n", by: 5, replica: &p.ra)
        _ = try p.b.increment("n", by: 3, replica: &p.rb)
        _ = try p.b.increment("n", by: -1, replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "n") == 7 && p.b.value(at: "n") == 7)
        _ = try p.a.increment("n", by: 0.5, replica: &p.ra)
        #expect(p.a.value(at: "n") == 7.5)
    }

    @Test func restartKeepsIncrementsConcurrentWithIt() throws {
        var p = try Pair()
        _ = try p.a.increment("n", by: 10, replica: &p.ra)
        try p.sync()
        _ = try p.a.restart("n", with: 100, replica: &p.ra)  // saw the 10
        _ = try p.b.increment("n", by: 2, replica: &p.rb)  // concurrent
        try p.sync()
        #expect(p.a.value(at: "n") == 102 && p.b.value(at: "n") == 102)
    }

    @Test func restartsAreLastWriterWins() throws {
        var p = try Pair()
        _ = try p.a.restart("n", with: 1, replica: &p.ra)
        p.clock.advance(1)
        _ = try p.b.restart("n", with: 2, replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "n") == 2 && p.a.encode() == p.b.encode())
    }

    @Test func incrementingANonCounterStartsFromZero() throws {
        var p = try Pair()
        _ = try p.a.increment("x", by: 4, replica: &p.ra)  // x was the register 1
        #expect(p.a.value(at: "x") == 4)
        _ = try p.a.set("x", to: "text", replica: &p.ra)
        _ = try p.a.increment("x", by: 1, replica: &p.ra)
        #expect(p.a.value(at: "x") == 1)
        #expect(throws: CRDTError.invalidNumber(FieldPath(["x"]))) { try p.a.increment("x", by: .nan, replica: &p.ra) }
    }

    @Test func declaredCounterFieldsTakeNumbersOnly() throws {
        let types = TypeDeclarations(strict: true, declared: [FieldPath(["hits"]): .counter])
        var r = makeReplica(1)
        var d = try Document(id: "c")
        _ = try d.upsert(["hits": 3], types: types, replica: &r)
        _ = try d.increment("hits", by: 2, types: types, replica: &r)
        #expect(d.value(at: "hits") == 5)
        #expect(throws: CRDTError.typeMismatch(FieldPath(["hits"]), expected: .counter)) {
            try d.upsert(["hits": "many"], types: types, replica: &r)
        }
    }
}

@Suite struct AttachmentTests {
    @Test func tokensAreLWWAndMaterializeAsObjects() throws {
        var p = try Pair()
        let t1 = AttachmentToken(id: "blob-1", length: 10, metadata: ["name": "a.png"])
        let t2 = AttachmentToken(id: "blob-2", length: 20)
        _ = try p.a.setAttachment("photo", t1, replica: &p.ra)
        p.clock.advance(1)
        _ = try p.b.setAttachment("photo", t2, replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "photo") == ["_type": "attachment", "id": "blob-2", "len": 20, "metadata": [:]])
        #expect(AttachmentToken(materialized: t1.materialized) == t1)
        let types = TypeDeclarations(strict: true, declared: [FieldPath(["photo"]): .attachment])
        _ = try p.a.upsert(["photo": t1.materialized], types: types, replica: &p.ra)
        #expect(p.a.value(at: "photo") == t1.materialized)
        #expect(throws: CRDTError.typeMismatch(FieldPath(["photo"]), expected: .attachment)) {
            try p.a.upsert(["photo": "not a token"], types: types, replica: &p.ra)
        }
    }
}

@Suite struct SlotChildrenTests {
    @Test func keysStayInCanonicalOrderWhateverTheInsertionOrder() {
        var c = SlotChildren()
        var s = Slot()
        s.marker = Meta(stamp: 1, site: SiteID(1), dot: HLCTimestamp(rawValue: 1))
        for k in ["bb", "a", "ccc", "b", "é", "aa"] { c[k] = s }
        #expect(Array(c.keys) == ["a", "b", "aa", "bb", "é", "ccc"])
        c["b"] = nil
        #expect(Array(c.keys) == ["a", "aa", "bb", "é", "ccc"] && c["b"] == nil && c["aa"] == s)
        c["zz", default: Slot()].register = Register(meta: s.marker!, payload: .value(1))
        #expect(c["zz"]?.register?.payload == .value(1))
        c.removeAll { $0.register != nil }
        #expect(c.count == 5)
    }

    @Test func plainRegistersShareOneMetaRecordAndTheTableStaysBounded() throws {
        var r = makeReplica(1)
        var d = try Document(id: "x")
        var fields: [String: Value] = ["m": ["k": 1]]
        for i in 0..<20 { fields["f\(i)"] = .int(Int64(i)) }
        _ = try d.upsert(fields, types: .nonStrict, replica: &r)
        let decoded = try Document.decode(d.encode())
        #expect(decoded.root.children.compactRegisterCount == 20)  // "m" is a MAP: boxed
        #expect(decoded.root.children.metaRecordCount == 1)
        for i in 0..<10_000 { _ = try d.set(FieldPath(["f\(i % 3)"]), to: .int(Int64(i)), replica: &r) }
        #expect(d.root.children.metaRecordCount <= 2 * d.root.children.count + 8)
        #expect(d.root.children.compactRegisterCount == 20)
        // Equality is by content, whatever spare records either table holds.
        let reloaded = try Document.decode(d.encode())
        #expect(reloaded.root.children.metaRecordCount < d.root.children.metaRecordCount)
        #expect(reloaded == d && reloaded.root.children.hashValue == d.root.children.hashValue)
    }
}

@Suite struct TypeConflictPruningTests {
    @Test func olderMapContentUnderANewerRegisterIsPrunedAndANewerMapWriteStartsEmpty() throws {
        var p = try Pair()
        _ = try p.b.set("tags.color", to: "blue", types: .nonStrict, replica: &p.rb)
        p.clock.advance(1)
        _ = try p.a.set("tags", to: ["red"], replica: &p.ra)
        try p.sync()
        #expect(p.a.slot(at: "tags")?.children.isEmpty == true)  // b's tags.color is gone for good
        p.clock.advance(1)
        _ = try p.b.set("tags.size", to: 2, types: .nonStrict, replica: &p.rb)
        try p.sync()
        #expect(p.a.value(at: "tags") == ["size": 2])
        // The array register can never win again: only its Meta is kept, as a barrier.
        #expect(p.a.slot(at: "tags")?.register?.payload == nil)
        #expect(p.a.encode() == p.b.encode())
    }
}
