import Testing
import Values
@testable import Sync
@testable import SyncProtocol

@Suite struct SyncMessageCodecTests {
    @Test func roundTrip_everyMessage() throws {
        var types = Set<String>()
        for m in SampleMessages.all {
            let bytes = m.encode()
            let decoded = try SyncMessageDecoder.decode(bytes)
            #expect(decoded == m, "\(m.typeName)")
            #expect(decoded.encode() == bytes)
            types.insert(m.typeName)
        }
        #expect(types.count == 20, "every message type is covered")
    }

    @Test func entrySize_matchesEncoding() {
        let entries = [ChangeEntry(document: SampleMessages.car1, kind: .upsert, payload: .state(Array(repeating: 7, count: 300))),
                       ChangeEntry(document: SampleMessages.objectID, kind: .delete, payload: .delta([]))]
        for e in entries {
            let whole = SyncMessage.changes(txn: 1, entries: [e]).encode().count
            let empty = SyncMessage.changes(txn: 1, entries: []).encode().count
            #expect(whole - empty == e.encodedSize)
        }
    }

    @Test func documentHash_matchesTheDocumentedExamples() {
        #expect(DocumentHash.of(collection: "cars", id: "car-1") == 0x31b3_3814_aadb_b9ef)
        #expect(DocumentHash.of(collection: "cars", id: ["vin": "W0L1"]) == 0xc993_e1e0_4ab4_5955)
    }

    /// `{k: 1}` and `{k: 1.0}` are one row in PostgreSQL and one document in a small peer's store:
    /// a peer's `have` of the one must name the server's copy of the other.
    @Test func documentHash_isOneForBothNumberFormsOfAnID() {
        let asInt: Value = ["k": .int(1), "list": .array([.int(2), .string("2")])]
        let asDouble: Value = ["k": .double(1.0), "list": .array([.double(2.0), .string("2")])]
        #expect(DocumentHash.of(collection: "cars", id: asInt) == DocumentHash.of(collection: "cars", id: asDouble))
        #expect(DocumentHash.of(collection: "cars", id: .double(7)) == DocumentHash.of(collection: "cars", id: .int(7)))
        #expect(DocumentHash.of(collection: "cars", id: .double(1.5)) != DocumentHash.of(collection: "cars", id: .int(1)))
        #expect(DocumentHash.of(collection: "cars", id: "1") != DocumentHash.of(collection: "cars", id: .int(1)), "a string is not a number")
    }

    // MARK: - Rejections

    func expectError(_ bytes: [UInt8], limits: SyncLimits = .default, _ check: (SyncProtocolError) -> Bool,
                     sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let m = try SyncMessageDecoder.decode(bytes, limits: limits)
            Issue.record("decoded \(m) instead of failing", sourceLocation: sourceLocation)
        } catch {
            #expect(check(error), "\(error)", sourceLocation: sourceLocation)
        }
    }

    func encode(_ v: Value) -> [UInt8] { CBORValueCodec.encode(v) }

    @Test func unknownType_isRejected() {
        expectError(encode(["t": "gossip"])) { $0 == .unknownType("gossip") }
    }

    @Test func notAMap_orNoType_isRejected() {
        expectError(encode([1, 2])) { if case .notAMessage = $0 { true } else { false } }
        expectError(encode(["x": 1])) { if case .notAMessage = $0 { true } else { false } }
        expectError(encode(["t": 5])) { if case .notAMessage = $0 { true } else { false } }
        expectError([]) { if case .malformed = $0 { true } else { false } }
    }

    @Test func missingAndMistypedFields_areRejected() {
        expectError(encode(["t": "credit"])) { $0 == .missingField(type: "credit", field: "bytes") }
        expectError(encode(["t": "credit", "bytes": "many"])) { $0 == .wrongType(type: "credit", field: "bytes", expected: "an unsigned integer") }
        expectError(encode(["t": "credit", "bytes": -1])) { if case .wrongType = $0 { true } else { false } }
        expectError(encode(["t": "credit", "bytes": 0])) { if case .outOfRange = $0 { true } else { false } }
        expectError(encode(["t": "unsub", "id": 4_294_967_296])) { if case .outOfRange = $0 { true } else { false } }
        expectError(encode(["t": "bye", "code": 70000, "reason": ""])) { if case .outOfRange = $0 { true } else { false } }
        expectError(encode(["t": "sub", "id": 1, "q": ""])) { if case .outOfRange = $0 { true } else { false } }
        expectError(encode(["t": "changes", "txn": 1, "docs": []])) { if case .outOfRange = $0 { true } else { false } }
    }

    @Test func unknownKeys_areIgnored() throws {
        #expect(try SyncMessageDecoder.decode(encode(["t": "ping", "n": 3, "zzz": [1, 2]])) == .ping(3))
    }

    @Test func entries_needExactlyOnePayload_andAValidID() {
        func changes(_ entry: Value) -> [UInt8] { encode(["t": "changes", "txn": 1, "docs": [entry]]) }
        expectError(changes(["c": "cars", "id": "a", "kind": "upsert"])) { if case .wrongType = $0 { true } else { false } }
        expectError(changes(["c": "cars", "id": 5, "kind": "upsert"])) { if case .missingField = $0 { true } else if case .wrongType = $0 { true } else { false } }
        expectError(changes(["c": "", "id": "a", "kind": "upsert"])) { if case .outOfRange = $0 { true } else { false } }
        expectError(changes(["c": "cars", "id": "a", "kind": "evict"])) { if case .wrongType = $0 { true } else { false } }
        // Both payloads: build by hand since Value has no byte strings.
        var w = CBORWriter()
        w.mapHeader(3); w.text("t"); w.text("changes"); w.text("txn"); w.unsigned(1); w.text("docs"); w.arrayHeader(1)
        w.mapHeader(5); w.text("c"); w.text("x"); w.text("id"); w.text("a"); w.text("kind"); w.text("upsert")
        w.text("delta"); w.byteString([1]); w.text("state"); w.byteString([2])
        expectError(w.bytes) { if case .wrongType = $0 { true } else { false } }
    }

    @Test func hello_validation() {
        var base: [String: Value] = ["t": "hello", "v": 1, "site": 7, "name": "n", "meta": [:], "credit": 65536, "max": 65536]
        // "key" is a byte string: write the message by hand with the writer.
        func hello(site: UInt64 = 7, key: [UInt8] = [1], cred: Value? = nil, meta: Value = [:]) -> [UInt8] {
            var w = CBORWriter()
            w.mapHeader(cred == nil ? 8 : 9)
            w.text("t"); w.text("hello"); w.text("v"); w.unsigned(1); w.text("key"); w.byteString(key); w.text("max"); w.unsigned(65536)
            if let cred { w.text("cred"); w.value(cred) }
            w.text("meta"); w.value(meta); w.text("name"); w.text("n"); w.text("site"); w.unsigned(site); w.text("credit"); w.unsigned(65536)
            return w.bytes
        }
        base["x"] = nil
        #expect((try? SyncMessageDecoder.decode(hello())) != nil)
        expectError(hello(site: 0)) { if case .outOfRange(_, "site", _) = $0 { true } else { false } }
        expectError(hello(key: [])) { if case .outOfRange(_, "key", _) = $0 { true } else { false } }
        expectError(hello(key: Array(repeating: 1, count: 257))) { if case .outOfRange(_, "key", _) = $0 { true } else { false } }
        expectError(hello(cred: ["apiKey": "a", "jwt": "b"])) { if case .wrongType(_, "cred", _) = $0 { true } else { false } }
        expectError(hello(cred: ["password": "x"])) { if case .wrongType(_, "cred", _) = $0 { true } else { false } }
        var many: [String: Value] = [:]
        for i in 0..<65 { many["k\(i)"] = .int(Int64(i)) }
        expectError(hello(meta: .object(many))) { if case .outOfRange(_, "meta", _) = $0 { true } else { false } }
        var deep: Value = 1
        for _ in 0..<40 { deep = [deep] }
        expectError(hello(meta: ["d": deep])) { _ in true }
    }

    @Test func have_mustBeAscendingMultiplesOf8() {
        func sub(_ have: [UInt8]) -> [UInt8] {
            var w = CBORWriter()
            w.mapHeader(4); w.text("q"); w.text("SELECT * FROM c"); w.text("t"); w.text("sub"); w.text("id"); w.unsigned(1)
            w.text("have"); w.byteString(have)
            return w.bytes
        }
        expectError(sub([1, 2, 3])) { if case .outOfRange(_, "have", _) = $0 { true } else { false } }
        expectError(sub([0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2])) { if case .outOfRange(_, "have", _) = $0 { true } else { false } }
        #expect((try? SyncMessageDecoder.decode(sub([0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]))) != nil)
    }

    @Test func known_mustBeAscendingMultiplesOf16_andRoundTrips() {
        func sub(_ known: [UInt8]) -> [UInt8] {
            var w = CBORWriter()
            w.mapHeader(4); w.text("q"); w.text("SELECT * FROM c"); w.text("t"); w.text("sub"); w.text("id"); w.unsigned(1)
            w.text("known"); w.byteString(known)
            return w.bytes
        }
        let one: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9]
        let two: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]
        expectError(sub(Array(one.prefix(8)))) { if case .outOfRange(_, "known", _) = $0 { true } else { false } }
        expectError(sub(two + one)) { if case .outOfRange(_, "known", _) = $0 { true } else { false } }
        expectError(sub(one + one)) { if case .outOfRange(_, "known", _) = $0 { true } else { false } }
        guard case .subscribe(let s)? = try? SyncMessageDecoder.decode(sub(one + two)) else { Issue.record("not decoded"); return }
        #expect(s.known == [KnownState(document: 1, state: 0x0909_0909_0909_0909), KnownState(document: 2, state: 0)])
        #expect(SyncMessage.subscribe(s).encode() == sub(one + two))
    }

    @Test func stateDigest_isTheFirst8BytesOfSHA256() {
        // sha256("") = e3b0c442 98fc1c14 9afbf4c8 996fb924 ...; sha256("abc") = ba7816bf 8f01cfea ...
        #expect(StateDigest.of([]) == 0xe3b0_c442_98fc_1c14)
        #expect(StateDigest.of(Array("abc".utf8)) == 0xba78_16bf_8f01_cfea)
        #expect(StateDigest.of([0x01, 0xA0]) == 0xa179_dbdd_51c5_6d09, "PROTOCOL.md §4.3's example")
    }

    @Test func nonCanonicalEncodings_areRejected() {
        // Keys out of order: {"t": "ping", "n": 1} written with "t" first.
        var w = CBORWriter()
        w.mapHeader(2); w.text("t"); w.text("ping"); w.text("n"); w.unsigned(1)
        expectError(w.bytes) { if case .malformed(.duplicateOrUnsortedKey) = $0 { true } else { false } }
        // Integer not in shortest form: n = 1 as 0x18 0x01.
        let long: [UInt8] = [0xA2, 0x61, 0x6E, 0x18, 0x01, 0x61, 0x74, 0x64] + Array("ping".utf8)
        expectError(long) { if case .malformed(.nonCanonical) = $0 { true } else { false } }
        // Trailing bytes after the message.
        expectError(SyncMessage.ping(1).encode() + [0]) { if case .malformed(.trailingBytes) = $0 { true } else { false } }
        // Indefinite-length map.
        expectError([0xBF, 0x61, 0x74, 0x64] + Array("ping".utf8) + [0xFF]) { if case .malformed(.indefiniteLength) = $0 { true } else { false } }
        // A tag.
        expectError([0xA2, 0x61, 0x6E, 0xC1, 0x01, 0x61, 0x74, 0x64] + Array("ping".utf8)) { if case .malformed = $0 { true } else { false } }
    }

    /// The `credit` shortcut (`canonicalCredit`) takes exactly the canonical encodings and decides
    /// every input as the generic decoder does.
    @Test func creditShortcut_agreesWithTheGenericDecoder() {
        let limits = SyncLimits.default
        let max = UInt64(limits.maxOutstandingCredit)
        let values: [UInt64] = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 1 << 32 - 1, 1 << 32, max, max + 1, .max]
        var inputs: [[UInt8]] = []
        for v in values {
            let bytes = SyncMessage.credit(bytes: v).encode()
            #expect(SyncMessageDecoder.canonicalCredit(bytes) == v, "canonical credit \(v) takes the shortcut")
            inputs.append(bytes)
            inputs.append(bytes + [0])                // trailing byte
            inputs.append(Array(bytes.dropLast()))    // truncated
        }
        let prefix = SyncMessageDecoder.creditPrefix
        inputs += [prefix + [0x18, 5], prefix + [0x19, 0, 200], prefix + [0x1a, 0, 0, 1, 0], prefix + [0x1b, 0, 0, 0, 1, 0, 0, 0, 0],  // not shortest
                   prefix + [0x20], prefix + [0x1c], prefix + [0x40], prefix + [0xf6], prefix]  // negative, reserved, bytes, null, none
        for bytes in inputs {
            let fast = Result { () throws(SyncProtocolError) in try SyncMessageDecoder.decode(bytes, limits: limits) }
            let generic = Result { () throws(SyncProtocolError) in try SyncMessageDecoder.decodeGeneric(bytes, limits: limits) }
            #expect("\(fast)" == "\(generic)", "\(bytes)")
        }
    }

    @Test func oversizedMessage_isRejectedBeforeDecoding() {
        var limits = SyncLimits()
        limits.maxMessageSize = 100
        let big = SyncMessage.upload(seq: 1, entries: [UploadEntry(document: SampleMessages.car1, delta: Array(repeating: 0, count: 200))]).encode()
        expectError(big, limits: limits) { $0 == .tooLarge(size: big.count, limit: 100) && $0.closeCode == .messageTooLarge }
        // A hostile length claim never sizes an allocation: 2^32 array elements in 10 bytes.
        expectError([0xA2, 0x61, 0x74, 0x62, 0x75, 0x70, 0x64, 0x64, 0x6F, 0x63, 0x73, 0x9A, 0xFF, 0xFF, 0xFF, 0xFF]) { if case .malformed = $0 { true } else { false } }
    }

    @Test func randomAndMutatedBytes_neverCrash() {
        var rng = SeededRandom(seed: 0x5EED_0008)
        var decodedCount = 0
        let valid = SampleMessages.all.map { $0.encode() }
        for i in 0..<20_000 {
            var bytes: [UInt8]
            if i % 4 == 0 {
                bytes = (0..<Int.random(in: 0...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            } else {
                bytes = valid[Int.random(in: 0..<valid.count, using: &rng)]
                for _ in 0..<Int.random(in: 1...4, using: &rng) where !bytes.isEmpty {
                    let at = Int.random(in: 0..<bytes.count, using: &rng)
                    switch Int.random(in: 0...3, using: &rng) {
                    case 0: bytes[at] = UInt8.random(in: 0...255, using: &rng)
                    case 1: bytes.remove(at: at)
                    case 2: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: at)
                    default: bytes = Array(bytes.prefix(at))
                    }
                }
            }
            if let m = try? SyncMessageDecoder.decode(bytes) {
                decodedCount += 1
                // Whatever decodes re-encodes canonically to the same bytes (unknown keys aside).
                let again = m.encode()
                #expect((try? SyncMessageDecoder.decode(again)) == m)
            }
        }
        #expect(decodedCount > 0)
    }

    @Test func everyTruncation_isAnError() {
        for m in SampleMessages.all {
            let bytes = m.encode()
            for n in 0..<bytes.count {
                #expect((try? SyncMessageDecoder.decode(Array(bytes.prefix(n)))) == nil)
            }
        }
    }
}

/// `query` / `result` and `hello.caps` (PROTOCOL.md §4.1, §4.15): bounds and the peer's truncation.
@Suite struct RemoteQueryCodecTests {
    func rejects(_ v: Value, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(throws: SyncProtocolError.self, sourceLocation: sourceLocation) { try SyncMessageDecoder.decode(CBORValueCodec.encode(v)) }
    }

    @Test func malformedQueriesAndResults_areRejected() {
        rejects(["t": "query", "id": 1, "q": "SELECT * FROM c", "ms": 1, "max": 1023])
        rejects(["t": "query", "id": 1, "q": "", "ms": 1, "max": 4096])
        rejects(["t": "result", "id": 1, "ms": 0])
        rejects(["t": "result", "id": 1, "ms": 0, "items": [], "err": ["code": "x", "msg": ""]])
        rejects(["t": "result", "id": 1, "ms": 0, "err": ["code": "", "msg": ""]])
        rejects(["t": "result", "id": 1, "ms": 0, "items": [], "warn": .array(Array(repeating: "w", count: 17))])
        rejects(["t": "result", "id": 1, "ms": 0, "items": [], "warn": [.string(String(repeating: "w", count: 1025))]])
    }

    @Test func capabilities_areBounded() {
        func hello(_ caps: [Value]) -> Value {
            ["t": "hello", "v": 1, "site": 1, "key": .string("k"), "name": "", "meta": [:], "credit": 65536, "max": 65536, "caps": .array(caps)]
        }
        rejects(hello(Array(repeating: "a", count: 17)))
        rejects(hello([""]))
        rejects(hello([.string(String(repeating: "a", count: 33))]))
        rejects(hello([1]))
    }

    @Test func fitting_cutsItemsFromTheEnd_withAWarning() {
        let items: [Value] = (0..<100).map { .object(["_id": .string("doc-\($0)"), "pad": .string(String(repeating: "p", count: 100))]) }
        let whole = RemoteQueryResult(id: 1, outcome: .success(items), elapsedMillis: 5)
        for max: UInt64 in [1024, 4096, 9000] {
            let cut = whole.fitting(maxBytes: max)
            #expect(SyncMessage.result(cut).encode().count <= Int(max))
            guard case .success(let kept) = cut.outcome else { Issue.record("\(cut)"); continue }
            #expect(!kept.isEmpty && kept.count < items.count)
            #expect(kept == Array(items.prefix(kept.count)))
            #expect(cut.warnings == ["result truncated to \(kept.count) of 100 items (the server accepts at most \(max) bytes)"])
            // Not much room wasted: one more item would not have fit.
            var more = cut
            more.outcome = .success(Array(items.prefix(kept.count + 1)))
            #expect(SyncMessage.result(more).encode().count > Int(max) - 16)
        }
        #expect(whole.fitting(maxBytes: 1 << 20) == whole, "what fits is left alone")
    }

    @Test func fitting_cutsALongErrorMessage() {
        let r = RemoteQueryResult(id: 1, outcome: .failure(RemoteQueryError(.failed, String(repeating: "é", count: 5000))))
        let cut = r.fitting(maxBytes: 1024)
        #expect(SyncMessage.result(cut).encode().count <= 1024)
        #expect(throws: Never.self) { try SyncMessageDecoder.decode(SyncMessage.result(cut).encode()) }
    }
}
