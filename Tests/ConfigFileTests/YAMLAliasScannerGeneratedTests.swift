@testable import ConfigFile
import TestRandomness
import Testing
import Yams

/// Random documents that Yams accepts, built from the constructs that make an alias hard to see
/// (quotes, comments, block scalars, flow collections, multi-line quoted scalars, all holding `*`):
/// the scanner must report exactly the documents an alias was put in.
@Suite struct YAMLAliasScannerGeneratedTests {
    /// Values with no alias, each valid after `key:` at indentation 0 (nested parts indented by 2).
    static let values = [
        " SELECT * FROM cars", " a*b", " it's", " x, *y", " p&*q", " value # *comment", " \"*x\"", " '*x'", " 'it''s *x'",
        " \"multi\n  *line\"", " |\n  *x\n  - *y\n\n  z", " >-\n    *z", " [a, 'b*', \"*c\"]", " {k: 'v*', m: \"*n\"}",
        "\n  - a\n  - '*b'\n  - c # *d", "\n  inner: value\n  other: '*x'", " &anchor value", " !!str '*tag'",
        "\n  - key: |\n      *content\n    other: 1",
    ]
    /// Places for `*anchor`, each valid after `key:`.
    static let aliases = [
        " *anchor", "\n  - *anchor", " [a, *anchor]", " {k: *anchor}", "\n  inner: *anchor",
        "\n  - key: |\n      text\n    other: *anchor", " [a,\n  *anchor]", "\n  ? *anchor\n  : 1",
    ]

    @Test(arguments: 0..<300)
    func reportsExactlyTheDocumentsWithAnAlias(seed: Int) throws {
        var random = SeededRandom(seed: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15 &+ 1)
        var lines = ["anchored: &anchor 1"]
        let withAlias = random.chance(50)
        let aliasAt = withAlias ? random.below(6) : -1
        for i in 0..<6 {
            lines.append(random.chance(20) ? "# comment * with *star" : "")
            let value = i == aliasAt ? Self.aliases[random.below(Self.aliases.count)] : Self.values[random.below(Self.values.count)]
            lines.append("key\(i):" + value)
        }
        let text = lines.joined(separator: "\n") + "\n"
        // The generator makes YAML: Yams reads every document (aliases included).
        #expect(throws: Never.self, "\(text)") { _ = try Yams.compose(yaml: text) }
        let found = YAMLAliasScanner.firstAlias(in: Array(text.utf8))
        #expect((found != nil) == withAlias, "\(text)")
    }
}
