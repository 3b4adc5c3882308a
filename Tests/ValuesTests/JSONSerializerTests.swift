import Testing
import TestRandomness
@testable import Values

@Suite struct JSONSerializerTests {
    @Test func serialize_sortsKeysByCodePoint() {
        let v: Value = ["b": 1, "a": ["z": true, "é": nil, "Z": 2.5], "": "x"]
        #expect(JSON.string(v) == "{\"\":\"x\",\"a\":{\"Z\":2.5,\"z\":true,\"é\":null},\"b\":1}")
    }

    @Test func serialize_escapesStrings() {
        #expect(JSON.string("a\"b\\c/\n\r\t\u{8}\u{C}\u{1}\u{1F}é😀") == "\"a\\\"b\\\\c/\\n\\r\\t\\b\\f\\u0001\\u001fé😀\"")
    }

    @Test func serialize_numbers() throws {
        #expect(JSON.string(.int(Int64.min)) == "-9223372036854775808")
        #expect(JSON.string(.double(0.1)) == "0.1")
        #expect(JSON.string(.double(2)) == "2.0")
        // Whole doubles past 2^53 print in full below 2^63 (jsonb would turn `1e+16` into an
        // integer's digits: DoubleRoundTripTests), with an exponent beyond.
        #expect(JSON.string(.double(1e16)) == "10000000000000000.0")
        #expect(JSON.string(.double(-9_007_199_254_740_994)) == "-9007199254740994.0")
        #expect(JSON.string(.double(9_007_199_254_740_992)) == "9007199254740992.0")
        #expect(JSON.string(.double(9.2e18)) == "9200000000000000000.0")
        #expect(JSON.string(.double(9_223_372_036_854_775_808)) == "9.223372036854776e+18")
        #expect(JSON.string(.double(1e300)) == "1e+300")
        for d in [1e16, -5e17, 9.2e18, 2.5e16, 9_007_199_254_740_994, 1e19] {
            #expect(try JSON.parse(JSON.string(.double(d))) == .double(d), "\(d)")
        }
        #expect(JSON.string(.double(.leastNonzeroMagnitude)) == "5e-324")
        #expect(JSON.string(.double(.nan)) == "null")
        #expect(JSON.string(.double(-.infinity)) == "null")
    }

    @Test func roundTrip_preservesNumberKinds() throws {
        let doubles: [Double] = [0.1, 1.0 / 3.0, 2.0, -0.0, 1e300, .leastNonzeroMagnitude, 123456789.125, Double.greatestFiniteMagnitude, 9007199254740993.0]
        for d in doubles {
            let back = try JSON.parse(JSON.serialize(.double(d)))
            guard case .double(let e) = back else { Issue.record("\(d) came back as \(back)"); continue }
            #expect(e == d && e.sign == d.sign)
        }
        for i: Int64 in [0, 1, -1, Int64.max, Int64.min, 9007199254740993] {
            #expect(try JSON.parse(JSON.serialize(.int(i))) == .int(i))
        }
    }

    /// Random values (seeded) survive serialize -> parse unchanged.
    @Test func roundTrip_randomValues() throws {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<500 {
            let v = randomValue(&rng, depth: 0)
            let bytes = JSON.serialize(v)
            #expect(try JSON.parse(bytes) == v)
            #expect(JSON.serialize(try JSON.parse(bytes)) == bytes)
        }
    }

    /// `serializedCount` is exactly the length `serialize` writes, for random values.
    @Test func serializedCount_matchesSerialize() {
        var rng = SplitMix64(seed: 7)
        for _ in 0..<2000 {
            let v = randomValue(&rng, depth: 0)
            #expect(JSON.serializedCount(v) == JSON.serialize(v).count, "\(v)")
        }
        #expect(JSON.serializedCount(.int(Int64.min)) == 20 && JSON.serializedCount(.int(0)) == 1 && JSON.serializedCount(.int(-9)) == 2)
    }

    /// The word-at-a-time escape scan against a byte-by-byte reference: every byte that needs
    /// escaping, at every offset of strings long enough to span several words, alone and in pairs.
    @Test func escaping_everySpecialByteAtEveryOffset() {
        func reference(_ bytes: [UInt8]) -> [UInt8] {
            var out: [UInt8] = []
            for b in bytes {
                switch b {
                case 0x22: out += [0x5C, 0x22]
                case 0x5C: out += [0x5C, 0x5C]
                case 0x0A: out += Array("\\n".utf8)
                case 0x0D: out += Array("\\r".utf8)
                case 0x09: out += Array("\\t".utf8)
                case 0x08: out += Array("\\b".utf8)
                case 0x0C: out += Array("\\f".utf8)
                case ..<0x20: out += Array("\\u00".utf8) + Array(String(b, radix: 16).leftPadded(2).utf8)
                default: out.append(b)
                }
            }
            return out
        }
        // Bytes around the special ones too (0x1F/0x20, 0x21/0x23, 0x5B/0x5D, 0x7F, 0x80, 0xFF):
        // the word tests must neither miss a special byte nor flag a plain one.
        let specials: [UInt8] = Array(0..<0x20) + [0x22, 0x5C]
        let neighbours: [UInt8] = [0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xC3, 0xFF, 0x41]
        for length in [1, 7, 8, 9, 15, 16, 17, 31, 40] {
            for at in 0..<length {
                for special in specials + neighbours {
                    var bytes = (0..<length).map { UInt8(0x61 + $0 % 26) }
                    bytes[at] = special
                    if at + 3 < length { bytes[at + 3] = neighbours[at % neighbours.count] }
                    let escaped = bytes.withUnsafeBufferPointer { p -> [UInt8] in
                        var out: [UInt8] = []
                        JSONWriter.writeEscaped(p, into: &out)
                        #expect(JSONWriter.escapedCount(p) == out.count)
                        return out
                    }
                    #expect(escaped == reference(bytes), "length \(length), byte \(special) at \(at)")
                }
            }
        }
    }

    func randomValue(_ rng: inout SplitMix64, depth: Int) -> Value {
        switch rng.next() % (depth > 3 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(rng.next() & 1 == 0)
        case 2: return .int(Int64(bitPattern: rng.next()) >> (rng.next() % 64))
        case 3:
            let d = Double(bitPattern: rng.next())
            return d.isFinite && d != 0 ? .double(d) : .double(0.5)
        case 4: return .string(randomString(&rng))
        case 5: return .array((0..<Int(rng.next() % 4)).map { _ in randomValue(&rng, depth: depth + 1) })
        default:
            var o: [String: Value] = [:]
            for _ in 0..<Int(rng.next() % 4) { o[randomString(&rng)] = randomValue(&rng, depth: depth + 1) }
            return .object(o)
        }
    }

    func randomString(_ rng: inout SplitMix64) -> String {
        let pool: [Unicode.Scalar] = ["a", "b", "\"", "\\", "\n", "\u{0}", "\u{1F}", "é", "€", "😀", "\u{10FFFF}", " "]
        var s = ""
        for _ in 0..<Int(rng.next() % 6) { s.unicodeScalars.append(pool[Int(rng.next() % UInt64(pool.count))]) }
        return s
    }
}

typealias SplitMix64 = SeededRandom

private extension String {
    func leftPadded(_ n: Int) -> String { String(repeating: "0", count: max(0, n - count)) + self }
}
