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

    @Test func serialize_numbers() {
        #expect(JSON.string(.int(Int64.min)) == "-9223372036854775808")
        #expect(JSON.string(.double(0.1)) == "0.1")
        #expect(JSON.string(.double(2)) == "2.0")
        #expect(JSON.string(.double(1e16)) == "1e+16")
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
