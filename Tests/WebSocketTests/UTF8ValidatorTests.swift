import Testing
import TestRandomness
@testable import WebSocket

@Suite struct UTF8ValidatorTests {
    static let valid: [[UInt8]] = [
        [], Array("plain ascii, longer than eight bytes".utf8), Array("κόσμε".utf8),
        [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80],
        [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF], Array("emoji 😀 mixed".utf8),
    ]

    /// Each invalid sequence with the index of the first byte that makes it invalid.
    static let invalid: [([UInt8], Int)] = [
        ([0x80], 0),                         // stray continuation
        ([0xC0, 0x80], 0), ([0xC1, 0xBF], 0), // overlong 2-byte leads
        ([0xE0, 0x80, 0x80], 1),             // overlong 3-byte
        ([0xED, 0xA0, 0x80], 1),             // UTF-16 surrogate U+D800
        ([0xF0, 0x80, 0x80, 0x80], 1),       // overlong 4-byte
        ([0xF4, 0x90, 0x80, 0x80], 1),       // above U+10FFFF
        ([0xF5, 0x80, 0x80, 0x80], 0), ([0xFF], 0),
        ([0x41, 0x42, 0xC3, 0x28], 3),       // bad continuation after ASCII
        (Array("κόσμε-εδιτεδ".utf8) + [0xED, 0xA0, 0x80] + Array("edited".utf8), 24),
    ]

    @Test func validSequences_pass_atEverySplit() {
        for bytes in Self.valid {
            for split in 0...bytes.count {
                var v = UTF8Validator()
                let first = v.feed(Array(bytes[..<split]))
                let second = v.feed(Array(bytes[split...]))
                #expect(first && second && v.isAtBoundary)
            }
        }
    }

    @Test func invalidSequences_failAtTheFirstBadByte() {
        for (bytes, bad) in Self.invalid {
            // Bytes before the bad one are accepted (they could still be valid)…
            var v = UTF8Validator()
            let prefixOK = v.feed(Array(bytes[..<bad]))
            #expect(prefixOK, "prefix of \(bytes)")
            // …and the bad byte fails immediately, byte by byte.
            let badOK = v.feed([bytes[bad]])
            #expect(!badOK, "\(bytes) at \(bad)")
        }
    }

    @Test func truncatedSequence_isNotAtBoundary() {
        var v = UTF8Validator()
        let a = v.feed([0xF0, 0x9F, 0x98])
        #expect(a && !v.isAtBoundary)
        let b = v.feed([0x80])
        #expect(b && v.isAtBoundary)
    }

    @Test func agreesWithStandardLibrary_onRandomBytes() {
        var rng = SeededRandom(seed: 11)
        for _ in 0..<2000 {
            let n = Int.random(in: 0...12, using: &rng)
            // Bias towards interesting lead and continuation bytes.
            let pool: [UInt8] = [0x41, 0x7F, 0x80, 0xBF, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xA0, 0x90, 0x8F]
            let bytes = (0..<n).map { _ in pool.randomElement(using: &rng)! }
            let ours = bytes.withUnsafeBytes { UTF8Validator.isValid($0) }
            let stdlib = String(validating: bytes, as: UTF8.self) != nil
            #expect(ours == stdlib, "\(bytes)")
        }
    }
}
