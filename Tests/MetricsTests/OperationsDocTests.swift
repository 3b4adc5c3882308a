import BigPeerServer
import Metrics
import Sockets
import Testing

/// docs/OPERATIONS.md's metrics table is `bigpeer metrics list`'s output: regenerate it with
/// `bigpeer metrics list` when a family changes.
@Suite struct OperationsDocTests {
    @Test func metricsTableMatchesTheDeclarations() throws {
        let root = "\(#filePath)".split(separator: "/").dropLast(3).joined(separator: "/")
        let doc = try #require(FileBytes.read("/" + root + "/docs/OPERATIONS.md").map { String(decoding: $0, as: UTF8.self) })
        let begin = "<!-- metrics-table:begin (bigpeer metrics list) -->\n"
        let end = "<!-- metrics-table:end -->"
        let start = try #require(doc.firstRange(of: begin)?.upperBound)
        let stop = try #require(doc.firstRange(of: end)?.lowerBound)
        #expect(String(doc[start..<stop]) == ServiceMetrics.all.markdownTable(), "run `bigpeer metrics list` and paste its table into docs/OPERATIONS.md")
    }
}
