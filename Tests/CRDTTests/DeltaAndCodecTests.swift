import Testing
import TestRandomness
import Values
@testable import CRDT

@Suite struct DeltaTests {
    @Test func deltaSinceTheCurrentVersionIsEmptyAndMergingItChangesNothing() throws {
        var p = try Pair()
        let d = p.a.delta(since: p.b.versionVector)
        #expect(d.isEmpty)
        let before = p.b.encode()
        #expect(try p.b.merge(d).isEmpty)
        #expect(p.b.encode() == before)
    }

    @Test func changeSetNamesTheChangedPaths() throws {
        var p = try Pair(initial: ["m": ["k": 1], "x": 1])
        _ = try p.a.set("m.k", to: 2, replica: &p.ra)
        _ = try p.a.set("x", to: 1, replica: &p.ra)  // rewritten but equal: not a change
        let changes = try send(p.a, to: &p.b)
        #expect(changes.paths == [FieldPath(["m", "k"])])
        #expect(!changes.existenceChanged)
    }

    @Test func aDeltaThatStartsAfterWhatTheReceiverHasIsRejected() throws {
        var p = try Pair()
        let old = p.b.versionVector
        _ = try p.a.set("x", to: 2, replica: &p.ra)
        var third = try Document(id: "doc")  // has seen nothing
        let d = p.a.delta(since: old)
        #expect(throws: CRDTError.deltaGap(site: SiteID(0xA))) { try third.merge(d) }
        #expect(third.materialize() == nil)
    }

    @Test func oneFieldDeltaIsSmallWhateverTheDocumentSize() throws {
        for fieldCount in [20, 5_000] {
            var r = makeReplica(0x1234_5678_9ABC_DEF0)
            var d = try Document(id: "big")
            var fields: [String: Value] = [:]
            for i in 0..<fieldCount { fields["field\(i)"] = .string(String(repeating: "v", count: 40)) }
            _ = try d.upsert(fields, replica: &r)
            let since = d.versionVector
            _ = try d.set("field7", to: "new value", replica: &r)
            let bytes = d.delta(since: since).encode()
            let fieldSize = CBORValueCodec.encode(.string("field7")).count + CBORValueCodec.encode("new value").count
            #expect(bytes.count < 100 + fieldSize, "\(fieldCount) fields: \(bytes.count) bytes")
        }
    }

    @Test func tombstonesAreReapedAfterTheTTLAndLatePeersGetAResetSnapshot() throws {
        var p = try Pair(initial: ["x": 1, "y": 2])
        let late = p.b  // goes offline now
        _ = try p.a.unset("y", replica: &p.ra)
        _ = try send(p.a, to: &p.b)
        p.clock.advance(31 * 86_400_000)
        let cutoff = HLCTimestamp(physicalMillis: p.clock.now - 30 * 86_400_000, logical: 0)
        #expect(p.a.reapTombstones(createdBefore: cutoff) == 1)
        #expect(p.b.reapTombstones(createdBefore: cutoff) == 1)
        #expect(p.a.encode() == p.b.encode())
        #expect(p.a.value(at: "y") == nil)
        // The late peer's version vector does not cover the reaped tombstone: it gets a reset.
        let d = p.a.delta(since: late.versionVector)
        #expect(d.kind == .reset)
        var returning = late
        var rl = makeReplica(0xC, clock: p.clock)
        _ = try returning.set("z", to: 3, replica: &rl)  // its own unseen write survives the reset
        let changes = try returning.merge(try Delta.decode(d.encode()))
        #expect(changes.paths.contains(FieldPath(["y"])))
        #expect(returning.materialize() == ["_id": "doc", "x": 1, "z": 3])
        _ = try send(returning, to: &p.a)
        #expect(p.a.materialize() == ["_id": "doc", "x": 1, "z": 3])
    }

    @Test func deletedDocumentsReapToNothing() throws {
        var p = try Pair()
        _ = p.a.delete(replica: &p.ra)
        p.clock.advance(1000)
        #expect(p.a.reapTombstones(createdBefore: HLCTimestamp(physicalMillis: p.clock.now, logical: 0)) == 1)
        #expect(p.a.root.isEmpty)
        #expect(p.a.materialize() == nil)
    }
}

@Suite struct DocumentCodecTests {
    func sampleDocument() throws -> Document {
        var p = try Pair(initial: ["m": ["k": [1, 2.5, "x"]], "n": nil])
        _ = try p.a.increment("c", by: 3, replica: &p.ra)
        _ = try p.b.increment("c", by: 4, replica: &p.rb)
        _ = try p.b.restart("r", with: 9, replica: &p.rb)
        _ = try p.a.setAttachment("f", AttachmentToken(id: "blob", length: 3, metadata: ["t": "png"]), replica: &p.ra)
        _ = try p.a.unset("m.k", replica: &p.ra)
        _ = try p.b.insertInitial(["i": true], replica: &p.rb)
        try p.sync()
        return p.a
    }

    @Test func stateRoundTripsByteForByte() throws {
        let d = try sampleDocument()
        let bytes = d.encode()
        let back = try Document.decode(bytes)
        #expect(back == d)
        #expect(back.encode() == bytes)
        #expect(back.materialize() == d.materialize())
    }

    @Test func decoderRejectsWrongVersionsKindsAndGarbage() throws {
        let bytes = try sampleDocument().encode()
        var wrongVersion = bytes
        wrongVersion[1] = 0x02
        #expect(throws: CRDTError.unsupportedVersion(2)) { try Document.decode(wrongVersion) }
        #expect(throws: CRDTError.self) { try Delta.decode(bytes) }
        #expect(throws: CRDTError.self) { try Document.decode([]) }
        #expect(throws: CRDTError.self) { try Document.decode(bytes + [0]) }
    }

    @Test func decoderSurvivesRandomBytesTruncationsAndMutations() throws {
        let state = try sampleDocument().encode()
        let delta = try sampleDocument().delta(since: VersionVector()).encode()
        var rng = SeededRNG(seed: 77)
        for input in [state, delta] {
            for cut in 0..<input.count {
                #expect(throws: CRDTError.self) { try Document.decode(Array(input[..<cut])) }
                #expect(throws: CRDTError.self) { try Delta.decode(Array(input[..<cut])) }
            }
            for _ in 0..<3000 {
                var m = input
                for _ in 0..<(1 + rng.next() % 3) {
                    let i = Int(rng.next() % UInt64(m.count))
                    m[i] = UInt8(truncatingIfNeeded: rng.next())
                }
                if let d = try? Document.decode(m) { _ = d.materialize(); _ = d.encode() }
                if let d = try? Delta.decode(m) {
                    var target = try Document(id: "doc")
                    _ = try? target.merge(d)
                    _ = target.materialize()
                }
            }
        }
        for _ in 0..<3000 {
            let bytes = (0..<(rng.next() % 64)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            _ = try? Document.decode(bytes)
            _ = try? Delta.decode(bytes)
        }
    }

    @Test func hostileNestingIsRejected() {
        // A delta whose slot tree nests 10 000 levels deep: {4: {"a": {4: {"a": ...}}}}
        var bytes: [UInt8] = [0x86, 0x01, 0x01, 0x80, 0x80, 0x80]
        for _ in 0..<10_000 { bytes += [0xA1, 0x04, 0xA1, 0x61, 0x61] }
        bytes += [0xA0]
        #expect(throws: CRDTError.self) { try Delta.decode(bytes) }
    }
}
