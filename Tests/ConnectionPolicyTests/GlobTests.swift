@testable import ConnectionPolicy
import TestRandomness
import Testing

@Suite struct GlobTests {
    @Test func wildcards_escapes_andExactText() throws {
        let cases: [(String, String, Bool)] = [
            ("tablet-*", "tablet-7", true), ("tablet-*", "tablet-", true), ("tablet-*", "phone-1", false),
            ("*", "", true), ("*", "anything", true), ("", "", true), ("", "x", false),
            ("?", "é", true), ("?", "", false), ("??", "é", false),
            ("a*b*c", "aXXbYYc", true), ("a*b*c", "aXXcYYb", false), ("a**b", "ab", true),
            ("\\*", "*", true), ("\\*", "x", false), ("a\\?", "a?", true), ("a\\?", "ab", false), ("\\\\", "\\", true),
            ("Kate", "\u{212A}ate", false),  // the Kelvin sign is not a K: scalars compare exactly
            ("crew-??", "crew-42", true), ("crew-??", "crew-4", false),
        ]
        for (pattern, text, expected) in cases {
            #expect(try Glob(pattern).matches(text) == expected, "\(pattern) ~ \(text)")
        }
    }

    @Test func badPatterns_areRefused() {
        #expect(throws: GlobError.danglingEscape) { try Glob("abc\\") }
        #expect(throws: GlobError.tooLong(bytes: 1025, limit: 1024)) { try Glob(String(repeating: "a", count: 1025)) }
        #expect(throws: GlobError.tooManyTokens(256, limit: 255)) { try Glob(String(repeating: "?", count: 256)) }
        // Runs of `*` collapse, so they do not count against the limit.
        #expect(throws: Never.self) { try Glob(String(repeating: "*", count: 1000)) }
    }

    /// The pathological pattern of backtracking matchers: `(*a)^n b` against `a^m` is exponential
    /// there; here it is one pass, and the answer is right.
    @Test func pathologicalPattern_isOnePass() throws {
        let pattern = try Glob(String(repeating: "*a", count: 120) + "*b")
        #expect(!pattern.matches(String(repeating: "a", count: 16_384)))
        #expect(pattern.matches(String(repeating: "a", count: 16_384) + "b"))
        let long = try Glob(String(repeating: "?", count: 200) + "*")
        #expect(long.matches(String(repeating: "x", count: 200)))
        #expect(!long.matches(String(repeating: "x", count: 199)))
        let lastPosition = try Glob(String(repeating: "a", count: 254) + "*")
        #expect(lastPosition.matches(String(repeating: "a", count: 300)))
    }

    /// Against a plain dynamic-programming matcher, on random patterns and texts over a small alphabet.
    @Test func agreesWithAReferenceMatcher() throws {
        var rng = SeededRandom(seed: 0x61_6C_6F_62)
        let alphabet: [Character] = ["a", "b", "é"]
        for _ in 0..<5000 {
            let pattern = String((0..<rng.below(9)).map { _ in [alphabet[0], alphabet[1], alphabet[2], "*", "?"][rng.below(5)] })
            let text = String((0..<rng.below(12)).map { _ in alphabet[rng.below(3)] })
            #expect(try Glob(pattern).matches(text) == Self.reference(Array(pattern.unicodeScalars), Array(text.unicodeScalars)), "\(pattern) ~ \(text)")
        }
    }

    static func reference(_ p: [Unicode.Scalar], _ t: [Unicode.Scalar]) -> Bool {
        // m[i][j]: p[..<i] matches t[..<j].
        var m = Array(repeating: Array(repeating: false, count: t.count + 1), count: p.count + 1)
        m[0][0] = true
        for i in 1...max(1, p.count) where i <= p.count {
            for j in 0...t.count {
                switch p[i - 1] {
                case "*": m[i][j] = m[i - 1][j] || (j > 0 && m[i][j - 1])
                case "?": m[i][j] = j > 0 && m[i - 1][j - 1]
                default: m[i][j] = j > 0 && m[i - 1][j - 1] && p[i - 1] == t[j - 1]
                }
            }
        }
        return m[p.count][t.count]
    }
}
