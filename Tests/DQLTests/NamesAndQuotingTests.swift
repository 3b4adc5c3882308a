import Testing
import TestRandomness
import Values
import Quoting
@testable import DQL

/// #16 items 2, 3, 7, 8: names are NFC without NUL, quoting is byte-wise and reads back exactly,
/// paths are bounded, index names fit PostgreSQL's 63 bytes. Each failed before its fix.
@Suite struct NamesAndQuotingTests {
    @Test func quotedNamesMustBeNFCWithoutNUL() throws {
        for bad in ["SELECT * FROM `\u{212A}ate`", "SELECT * FROM `cafe\u{301}`", "SELECT * FROM `colB\u{0}x`",
                    "UPDATE c SET `a\u{0}b` = 1", "SELECT * FROM c WHERE a['cafe\u{301}'] = 1",
                    "SELECT * FROM c WHERE a['x\\u0000'] = 1", "INSERT INTO c DOCUMENTS ({'cafe\u{301}': 1})"] {
            #expect(throws: DQLSyntaxError.self, "\(bad)") { try DQL.parse(bad) }
        }
        guard case .select(let s) = try DQL.parse("SELECT * FROM `caf\u{E9}` WHERE v = 'cafe\u{301}'") else { Issue.record(); return }
        #expect(s.from.name.utf8Equals("caf\u{E9}"))
        // Values are kept as sent (NFD string literal), only names are checked.
        #expect(Printer.print(s.filter!).utf8.elementsEqual("v = 'cafe\u{301}'".utf8))
    }

    @Test func pathsAreBounded() throws {
        let deep = "SELECT * FROM c WHERE a" + String(repeating: ".b", count: 10_000) + " = 1"
        #expect(throws: DQLSyntaxError.self) { try DQL.parse(deep) }
        let ok = "SELECT * FROM c WHERE a" + String(repeating: ".b", count: 100) + " = 1"
        _ = try DQL.parse(ok)
    }

    @Test func indexNamesFitPostgresAndStayDistinct() {
        let planner = PushdownPlanner()
        let long1 = String(repeating: "\u{E9}", count: 40) + "first", long2 = String(repeating: "\u{E9}", count: 40) + "second"
        let names = [planner.indexName(collection: "c", name: long1), planner.indexName(collection: "c", name: long2),
                     planner.indexName(collection: String(repeating: "x", count: 200), name: String(repeating: "y", count: 200)),
                     planner.indexName(collection: "Kate", name: "i"), planner.indexName(collection: "\u{212A}ate", name: "i")]
        for n in names { #expect(n.utf8.count <= 63, "\(n)") }
        let distinct: Set<ExactString> = Set(names.map { ExactString($0) })
        #expect(distinct.count == names.count)
    }

    /// Fuzz: every quoting function reads back byte for byte through the DQL lexer, whatever the
    /// string (quotes, backslashes, combining marks after quotes, controls, non-ASCII).
    @Test func dqlQuotingReadsBackExactly() throws {
        var rng = SeededRandom(seed: 7)
        let pieces = ["'", "`", "\"", "\\", "\u{301}", "\u{E9}", "e", "K", "\u{212A}", "\n", "\t", "\u{1}", "\u{7F}", "%", "_", " ", "\u{1F600}", "a"]
        for _ in 0..<3_000 {
            let s = (0..<Int.random(in: 0...12, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
            // A string literal holds any text.
            let tokens = try Lexer.tokenize("SELECT " + Quote.dqlString(s))
            #expect(tokens.count >= 2 && tokens[1].kind == .string && tokens[1].text.utf8Equals(s), "\(Array(s.unicodeScalars))")
            // An identifier holds any name (NFC, no NUL; the fuzz alphabet has no NUL).
            if NameRules.problem(s) == nil, !s.isEmpty {
                let t = try Lexer.tokenize("SELECT * FROM " + Quote.dqlIdentifier(s))
                #expect(t[3].kind == .quotedIdentifier && t[3].text.utf8Equals(s), "\(Array(s.unicodeScalars))")
            }
            // SQL quoting doubles exactly the quote bytes and nothing else.
            let lit = Array(Quote.sqlLiteral(s).utf8), id = Array(Quote.sqlIdentifier(s).utf8)
            #expect(lit.count == s.utf8.count + 2 + s.utf8.filter { $0 == UInt8(ascii: "'") }.count)
            #expect(id.count == s.utf8.count + 2 + s.utf8.filter { $0 == UInt8(ascii: "\"") }.count)
        }
    }
}
