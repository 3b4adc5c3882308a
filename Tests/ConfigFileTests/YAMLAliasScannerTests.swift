@testable import ConfigFile
import Testing

@Suite struct YAMLAliasScannerTests {
    func alias(_ text: String) -> [Int]? {
        YAMLAliasScanner.firstAlias(in: Array(text.utf8)).map { [$0.line, $0.column] }
    }

    @Test func findsAnAliasWhereverANodeCanStart() {
        #expect(alias("a: *x\n") == [1, 4])
        #expect(alias("*x : 1\n") == [1, 1])
        #expect(alias("a:\n  - *x\n") == [2, 5])
        #expect(alias("a: [b, *x]\n") == [1, 8])
        #expect(alias("a: {b: *x}\n") == [1, 8])
        #expect(alias("a: [b,\n  *x]\n") == [2, 3])
        #expect(alias("? *x\n: 1\n") == [1, 3])
        #expect(alias("a: !!str *x\n") == [1, 10])
        #expect(alias("--- *x\n") == [1, 5])
        #expect(alias("'quoted key': *x\n") == [1, 15])
        // A quoted scalar over two lines, then an alias.
        #expect(alias("a: \"one\n  two\"\nb: *x\n") == [3, 4])
        // A block scalar ends at the first line indented less than its content.
        #expect(alias("a: |\n  *not an alias\nb: *x\n") == [3, 4])
        #expect(alias("- key: |\n    text\n  other: *x\n") == [3, 10])
        #expect(alias("a: |2\n  *content\n b: *x\n") == [3, 5])
        #expect(alias("ä: [é, *x]\n") == [1, 8])
    }

    @Test func leavesTextThatOnlyLooksLikeAnAlias() {
        #expect(alias("a: SELECT * FROM cars\n") == nil)
        #expect(alias("a: \"*x\"\n") == nil)
        #expect(alias("a: '*x'\n") == nil)
        #expect(alias("a: 'it''s *x'\n") == nil)
        #expect(alias("a: b # *x\n") == nil)
        #expect(alias("# *x\n") == nil)
        #expect(alias("a: it's fine\nb: c*d\n") == nil)
        #expect(alias("a: |\n  *x\n\n  - *y\nb: 1\n") == nil)
        #expect(alias("a: >-\n    *x\n") == nil)
        #expect(alias("a: x, *y\n") == nil)
        #expect(alias("a: postgresql://u:p&*x@h/db?a=1&b=*\n") == nil)
        #expect(alias("a: \"esc \\\" *x\"\n") == nil)
    }

    @Test func anchorsAloneAreHarmless() {
        #expect(alias("a: &anchor 1\nb: 2\n") == nil)
    }
}
