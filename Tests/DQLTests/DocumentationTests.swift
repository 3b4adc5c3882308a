import Foundation
import Testing
import Values
@testable import DQL

/// Keeps docs/DQL.md true: every ```dql block parses (and round-trips through the printer), and every
/// function-table row whose result is a plain literal evaluates to that literal.
@Suite struct DocumentationTests {
    static let text: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/DQL.md"), encoding: .utf8)) ?? ""
    }()

    @Test func dqlBlocks_parseAndRoundTrip() throws {
        let blocks = Self.text.components(separatedBy: "```dql\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
        #expect(blocks.count >= 25)
        for block in blocks {
            let ast = try DQL.parse(block)
            #expect(try DQL.parse(Printer.print(ast)) == ast, "\(block)")
        }
    }

    @Test func functionTables_resultsMatch() throws {
        let doc: Value = ["price": 2500, "note": nil, "status": "none", "name": "x"]
        let ev = Evaluator(context: EvaluationContext(nowMilliseconds: 1_700_000_000_123))
        var checked = 0
        let functions = Self.text.components(separatedBy: "## 8. Functions").last?.components(separatedBy: "## 9.").first ?? ""
        for line in functions.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            let example = cells[2], result = cells[3]
            // Only rows of the form: | fn | `expr` | `literal` (note) |
            guard example.hasPrefix("`"), example.hasSuffix("`"), example.dropFirst().firstIndex(of: "`") == example.index(before: example.endIndex),
                  result.hasPrefix("`"), let close = result.dropFirst().firstIndex(of: "`") else { continue }
            let rest = result[result.index(after: close)...]
            guard rest.isEmpty || rest.hasPrefix(" (") else { continue }
            let exampleText = String(example.dropFirst().dropLast()).replacingOccurrences(of: "\\|", with: "|")
            let resultText = String(result[result.index(after: result.startIndex)..<close])
            guard case .select(let q) = try DQL.parse("SELECT \(exampleText) AS e, \(resultText) AS r FROM c"),
                  case .expression(let e, _) = q.projections[0], case .expression(let r, _) = q.projections[1],
                  !r.contains(where: { if case .path = $0 { true } else { false } }) else { continue }
            let got = try ev.evaluate(e, in: doc)
            let want = try ev.evaluate(r, in: nil)
            #expect(got == want, "\(exampleText) gave \(String(describing: got)), docs say \(resultText)")
            checked += 1
        }
        #expect(checked >= 40)
    }
}
