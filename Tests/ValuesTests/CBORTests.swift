import Testing
import TestRandomness
@testable import Values

private func hex(_ bytes: [UInt8]) -> String {
    bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
}
private func unhex(_ s: String) -> [UInt8] {
    var out: [UInt8] = []
    var i = s.startIndex
    while i < s.endIndex {
        let j = s.index(i, offsetBy: 2)
        out.append(UInt8(s[i..<j], radix: 16) ?? 0)
        i = j
    }
    return out
}

@Suite struct CBORTests {
    /// RFC 8949 Appendix A examples that `Value` can represent, in their deterministic form.
    static let vectors: [(Value, String)] = [
        (0, "00"), (1, "01"), (10, "0a"), (23, "17"), (24, "1818"), (25, "1819"), (100, "1864"),
        (1000, "1903e8"), (1_000_000, "1a000f4240"), (1_000_000_000_000, "1b000000e8d4a51000"),
        (.int(Int64.max), "1b7fffffffffffffff"), (.int(Int64.min), "3b7fffffffffffffff"),
        (-1, "20"), (-10, "29"), (-100, "3863"), (-1000, "3903e7"),
        (0.0, "f90000"), (.double(-0.0), "f98000"), (1.0, "f93c00"), (1.1, "fb3ff199999999999a"),
        (1.5, "f93e00"), (65504.0, "f97bff"), (100000.0, "fa47c35000"),
        (3.4028234663852886e+38, "fa7f7fffff"), (1.0e+300, "fb7e37e43c8800759c"),
        (5.960464477539063e-8, "f90001"), (0.00006103515625, "f90400"), (-4.0, "f9c400"),
        (-4.1, "fbc010666666666666"), (.double(.infinity), "f97c00"), (.double(-.infinity), "f9fc00"),
        (false, "f4"), (true, "f5"), (nil, "f6"),
        ("", "60"), ("a", "6161"), ("IETF", "6449455446"), ("\"\\", "62225c"), ("\u{00fc}", "62c3bc"),
        ("\u{6c34}", "63e6b0b4"), ([], "80"), ([1, 2, 3], "83010203"), ([1, [2, 3], [4, 5]], "8301820203820405"),
        ([:], "a0"), (["a": 1, "b": [2, 3]], "a26161016162820203"),
        // §4.2.1: shorter keys sort first, whatever their first byte.
        (["b": 1, "aa": 2], "a261620162616102"),
    ]

    @Test func encodesRFC8949AppendixAVectorsDeterministically() throws {
        for (value, expected) in Self.vectors {
            #expect(hex(CBORValueCodec.encode(value)) == expected, "\(value)")
            #expect(try CBORValueCodec.decode(unhex(expected)) == value, "\(expected)")
        }
    }

    @Test func nanIsTheCanonicalHalfQuietNaN() throws {
        #expect(hex(CBORValueCodec.encode(.double(.nan))) == "f97e00")
        #expect(hex(CBORValueCodec.encode(.double(-.nan))) == "f97e00")
        guard case .double(let d) = try CBORValueCodec.decode(unhex("f97e00")) else { Issue.record("not a double"); return }
        #expect(d.isNaN)
    }

    @Test func halfPrecisionBoundariesRoundTrip() throws {
        // Subnormal halves, the largest half, and values just outside half precision.
        for d in [5.960464477539063e-8, 6.097555160522461e-05, 65504.0, 65505.0, 1.0 / 3.0, 1e-7, -2.0, 0.5, 1024.5] {
            let bytes = CBORValueCodec.encode(.double(d))
            #expect(try CBORValueCodec.decode(bytes) == .double(d), "\(d)")
        }
        #expect(hex(CBORValueCodec.encode(.double(65505.0))) == "fa477fe100")
    }

    static let rejected: [(String, String)] = [
        ("1817", "non-shortest argument"),
        ("190017", "non-shortest 2-byte argument"),
        ("9f01ff", "indefinite array"),
        ("7f6161ff", "indefinite text"),
        ("1c", "reserved additional info"),
        ("19", "truncated argument"),
        ("6461", "truncated string"),
        ("8301", "truncated array"),
        ("0101", "trailing bytes"),
        ("a2616101616102", "duplicate key"),
        ("a2616201616102", "unsorted keys"),
        ("a16261610161", "... truncated map"),
        ("62c328", "invalid UTF-8"),
        ("c074", "tag"),
        ("4101", "byte string"),
        ("f7", "undefined"),
        ("f820", "simple value"),
        ("1b8000000000000000", "integer above Int64.max"),
        ("3b8000000000000000", "integer below Int64.min"),
        ("fa3f800000", "1.0 as single precision"),
        ("fb3ff8000000000000", "1.5 as double precision"),
        ("f97e01", "non-canonical NaN payload"),
        ("9bffffffffffffffff", "absurd array length"),
        ("7bffffffffffffffff", "absurd string length"),
        ("a1016161", "integer map key"),
    ]

    @Test func rejectsMalformedAndNonCanonicalInputWithTypedErrors() {
        for (input, why) in Self.rejected {
            #expect(throws: CBORError.self, "\(why)") { try CBORValueCodec.decode(unhex(input)) }
        }
    }

    @Test func nonCanonicalInputIsAcceptedWhenCanonicalFormIsNotRequired() throws {
        let relaxed = CBORLimits(requireCanonical: false)
        #expect(try CBORValueCodec.decode(unhex("1817"), limits: relaxed) == 23)
        #expect(try CBORValueCodec.decode(unhex("fa3f800000"), limits: relaxed) == 1.0)
        #expect(try CBORValueCodec.decode(unhex("a2616201616102"), limits: relaxed) == ["a": 2, "b": 1])
        #expect(throws: CBORError.self) { try CBORValueCodec.decode(unhex("a2616101616102"), limits: relaxed) }
    }

    /// Streamed results (docs/API.md, "Large results") end their array with a break: read only
    /// without `requireCanonical`, and still bounded in count, depth and input.
    @Test func indefiniteLengthArraysAreReadOnlyWhenCanonicalFormIsNotRequired() throws {
        let relaxed = CBORLimits(requireCanonical: false)
        #expect(try CBORValueCodec.decode(unhex("a1656974656d739f0102ff"), limits: relaxed) == ["items": [1, 2]])
        #expect(try CBORValueCodec.decode(unhex("9fff"), limits: relaxed) == [])
        #expect(try CBORValueCodec.decode(unhex("9f9f01ff9fffff"), limits: relaxed) == [[1], []])
        #expect(throws: CBORError.indefiniteLength(offset: 0)) { try CBORValueCodec.decode(unhex("9f01ff")) }
        #expect(throws: CBORError.truncated(offset: 2)) { try CBORValueCodec.decode(unhex("9f01"), limits: relaxed) }
        #expect(throws: CBORError.self, "a break outside an indefinite array") { try CBORValueCodec.decode(unhex("ff"), limits: relaxed) }
        var few = relaxed
        few.maxContainerCount = 2
        #expect(throws: CBORError.lengthExceedsLimit(offset: 0, length: 3, limit: 2)) { try CBORValueCodec.decode(unhex("9f010203ff"), limits: few) }
        let deep = [UInt8](repeating: 0x9F, count: 100) + [UInt8](repeating: 0xFF, count: 100)
        #expect(throws: CBORError.tooDeep(offset: 65, limit: 64)) { try CBORValueCodec.decode(deep, limits: relaxed) }
        // Indefinite maps and strings stay refused: nothing BigPeer writes uses them.
        #expect(throws: CBORError.indefiniteLength(offset: 0)) { try CBORValueCodec.decode(unhex("bf616101ff"), limits: relaxed) }
    }

    @Test func enforcesDepthSizeAndLengthLimits() {
        let deep = [UInt8](repeating: 0x81, count: 100) + [0x00]
        #expect(throws: CBORError.tooDeep(offset: 65, limit: 64)) { try CBORValueCodec.decode(deep) }
        #expect(throws: CBORError.inputTooLarge(size: 5, limit: 4)) {
            try CBORValueCodec.decode([0x64, 0x61, 0x62, 0x63, 0x64], limits: CBORLimits(maxInputBytes: 4))
        }
        #expect(throws: CBORError.self) {
            try CBORValueCodec.decode([0x64, 0x61, 0x62, 0x63, 0x64], limits: CBORLimits(maxStringBytes: 3))
        }
        #expect(throws: CBORError.self) {
            try CBORValueCodec.decode([0x83, 1, 2, 3], limits: CBORLimits(maxContainerCount: 2))
        }
    }

    @Test func randomValuesRoundTripAndEncodeDeterministically() throws {
        var rng = SplitMix(seed: 42)
        for _ in 0..<2000 {
            let v = randomValue(&rng, depth: 0)
            let bytes = CBORValueCodec.encode(v)
            #expect(try CBORValueCodec.decode(bytes) == v)
            #expect(CBORValueCodec.encode(try CBORValueCodec.decode(bytes)) == bytes)
        }
    }

    @Test func randomBytesTruncationsAndMutationsNeverCrash() {
        var rng = SplitMix(seed: 7)
        for _ in 0..<3000 {
            let n = Int(rng.next() % 40)
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            _ = try? CBORValueCodec.decode(bytes)
        }
        for _ in 0..<500 {
            let valid = CBORValueCodec.encode(randomValue(&rng, depth: 0))
            for cut in 0..<valid.count {
                #expect(throws: CBORError.self) { try CBORValueCodec.decode(Array(valid[..<cut])) }
            }
            var mutated = valid
            let i = Int(rng.next() % UInt64(mutated.count))
            mutated[i] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
            _ = try? CBORValueCodec.decode(mutated)
        }
    }

    @Test func lowLevelReaderAndWriterPrimitivesRoundTrip() throws {
        var w = CBORWriter()
        w.arrayHeader(6)
        w.unsigned(UInt64.max)
        w.int(-5)
        w.byteString([1, 2, 3])
        w.text("héllo")
        w.null()
        w.double(2.5)
        var r = try CBORReader(w.bytes)
        #expect(try r.arrayHeader() == 6)
        #expect(try r.unsigned() == UInt64.max)
        #expect(try r.int() == -5)
        #expect(try r.byteString() == [1, 2, 3])
        #expect(try r.text() == "héllo")
        let skipped = r.skipNull()
        #expect(skipped)
        #expect(try r.double() == 2.5)
        try r.expectEnd()
        var r2 = try CBORReader(w.bytes)
        #expect(try r2.skipItemRange() == 0..<w.bytes.count)
        var r3 = try CBORReader([0x01])
        #expect(throws: CBORError.unexpectedType(offset: 0, expected: "text string")) { try r3.text() }
    }

    /// Text strings: ASCII takes the shortcut (`CBORReader.ascii`), anything else is validated as
    /// UTF-8 as before; both give the same strings and the same errors.
    @Test func textStrings_asciiShortcutAndValidation() throws {
        for s in ["", "t", "credit", String(repeating: "\u{7f}", count: 100), "héllo", "🚗-1", "a\u{0}b"] {
            var w = CBORWriter()
            w.text(s)
            var r = try CBORReader(w.bytes)
            #expect(try r.text() == s)
            let body = w.bytes.count - s.utf8.count
            #expect((CBORReader.ascii(w.bytes, body..<w.bytes.count) != nil) == s.utf8.allSatisfy { $0 < 0x80 }, "\(s)")
        }
        for invalid: [UInt8] in [[0xff], [0x80], [0xc3], [0x61, 0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]] {
            var r = try CBORReader([0x60 | UInt8(invalid.count)] + invalid)
            #expect(throws: CBORError.invalidUTF8(offset: 0)) { try r.text() }
        }
    }
}

typealias SplitMix = SeededRandom

func randomValue(_ rng: inout SplitMix, depth: Int) -> Value {
    let choice = rng.next() % (depth > 3 ? 5 : 7)
    switch choice {
    case 0: return .null
    case 1: return .bool(rng.next() & 1 == 0)
    case 2:
        let widths: [UInt64] = [24, 256, 65536, 1 << 32, UInt64.max]
        let w = widths[Int(rng.next() % 5)]
        return .int(Int64(bitPattern: rng.next() % w) * (rng.next() & 1 == 0 ? 1 : -1))
    case 3:
        let d = [Double(bitPattern: rng.next()), Double(Int64(bitPattern: rng.next() % 1000)) / 8, 0.1, -0.0, 1e300]
        let x = d[Int(rng.next() % 5)]
        return .double(x.isNaN ? 0.25 : x)
    case 4:
        let alphabet = Array("aé水😀b\"\\\u{0}")
        return .string(String((0..<(rng.next() % 6)).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }))
    case 5:
        return .array((0..<(rng.next() % 4)).map { _ in randomValue(&rng, depth: depth + 1) })
    default:
        var o: [String: Value] = [:]
        for _ in 0..<(rng.next() % 4) { o["k\(rng.next() % 10)"] = randomValue(&rng, depth: depth + 1) }
        return .object(o)
    }
}
