import Foundation
import Testing
import Values
@testable import DQL

/// Differential test of the pushdown planner against a real PostgreSQL (opt-in): random documents
/// and random conditions (mostly pushable, some not). For every query, the full pipeline — the
/// planner's SQL on PostgreSQL, then `memoryQuery` (residual filter, exact sort, OFFSET, LIMIT) over
/// the returned rows, or `countRows` — must give exactly the rows of the pure in-memory evaluation,
/// in the same order. Runs through `psql`; enable with the connection arguments, e.g.
///   DQL_TEST_PSQL="-h /tmp/pg -p 5432 -U postgres" swift test --filter PostgresDifferentialTests
/// Everything happens in a TEMP table, so parallel runs do not interfere.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["DQL_TEST_PSQL"] != nil))
struct PostgresDifferentialTests {
    enum Mode { case rows(ordered: Bool), count }

    static let values: [Value] = [
        nil, true, false, 0, 1, -1, 2.5, 1e20, .int(9007199254740993), .double(9007199254740992), .int(Int64.max),
        .int(1_152_921_504_606_847_000), .double(1_152_921_504_606_846_976), "", "x", "X", "é", "a%b", "a_b", "abc",
        "ab\\", "😀", [1], [1.0, "x"], ["x"], ["k": 1], ["k": 1.0], [:], [],
    ]
    static let literals = ["0", "1", "-1", "2.5", "1e20", "9007199254740993", "9007199254740992.0", "1152921504606847000",
                           "'x'", "'X'", "'é'", "''", "TRUE", "FALSE", "NULL", "[1]", "{'k': 1}", ":p", ":nothing.x"]
    static let paths = ["a", "b", "c", "n.x", "tags[0]", "tags[1]"]

    func atom(_ rng: inout SplitMix64) -> String {
        let p = Self.paths[rng.below(Self.paths.count)], l = Self.literals[rng.below(Self.literals.count)]
        let l2 = Self.literals[rng.below(Self.literals.count)]
        switch rng.below(13) {
        case 11: return ["lower(\(p)) = 'x'", "\(p) = a", "\(p) ILIKE 'X%'", "\(p) < [2]", "\(p) + 1 > 1"][rng.below(5)]
        case 12: return "\(p) = \(l)"
        case 0: return "\(p) = \(l)"
        case 1: return "\(p) != \(l)"
        case 2: return "\(p) \(["<", "<=", ">", ">="][rng.below(4)]) \(l)"
        case 3: return "\(l) \(["<", "<=", ">", ">="][rng.below(4)]) \(p)"
        case 4: return "\(p) \(rng.chance(50) ? "NOT " : "")IN (\(l2), \(l))"
        case 5: return "\(p) \(rng.chance(50) ? "NOT " : "")LIKE \(["'a%'", "'%b'", "'a\\\\%b'", "'_'", "'%'", "'a!_b' ESCAPE '!'", "'é'", "''"][rng.below(8)])"
        case 6: return "\(p) IS \(rng.chance(50) ? "NOT " : "")\(rng.chance(50) ? "NULL" : "MISSING")"
        case 7: return "\(p) \(rng.chance(50) ? "NOT " : "")BETWEEN \(l) AND \(l2)"
        case 8: return "\(l) \(rng.chance(50) ? "NOT " : "")IN tags"
        case 9: return "\(p) IN :arr"
        default: return p
        }
    }

    @Test func pushdown_agreesWithMemory() throws {
        // DQL_TEST_SEED varies the run; the default keeps it reproducible.
        var rng = SplitMix64(seed: ProcessInfo.processInfo.environment["DQL_TEST_SEED"].flatMap { UInt64($0) } ?? 2024)
        let docs: [Value] = (0..<400).map { i in
            var o: [String: Value] = ["_id": .string("d\(i)")]
            for f in ["a", "b", "c"] where rng.chance(85) { o[f] = Self.values[rng.below(Self.values.count)] }
            if rng.chance(50) { o["n"] = ["x": Self.values[rng.below(Self.values.count)]] }
            if rng.chance(60) { o["tags"] = .array((0..<rng.below(3)).map { _ in Self.values[rng.below(Self.values.count)] }) }
            return .object(o)
        }
        func quote(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }
        var script = "\\set ON_ERROR_STOP 1\nCREATE TEMP TABLE dql_diff (collection text, id text, value jsonb);\n"
        for d in docs { script += "INSERT INTO dql_diff VALUES ('c', \(quote(d["_id"]?.stringValue ?? "")), \(quote(JSON.string(d))));\n" }
        script += "INSERT INTO dql_diff VALUES ('other', 'z', '{\"_id\":\"z\",\"a\":1}');\n\\t on\n\\a\n"
        let planner = PushdownPlanner(table: PushdownTable(name: "dql_diff"))
        let context = EvaluationContext(arguments: ["p": "x", "arr": [1, "x", nil, 2.5], "nothing": [:]])
        var expected: [Int: (text: String, mode: Mode, plan: PushdownPlan, want: [Value])] = [:]
        for q in 0..<1500 {
            var condition = atom(&rng)
            for _ in 0..<rng.below(4) { condition = "(\(condition)) \(rng.chance(50) ? "AND" : "OR") \(rng.chance(30) ? "NOT " : "")\(atom(&rng))" }
            if rng.chance(20) { condition = "NOT (\(condition))" }
            var text = "SELECT * FROM c WHERE \(condition)"
            let ordered = rng.chance(30)
            if ordered {
                text += " ORDER BY \(Self.paths[rng.below(Self.paths.count)])\(rng.chance(50) ? " DESC" : ""), \(Self.paths[rng.below(Self.paths.count)])"
                text += " LIMIT \(rng.below(20)) OFFSET \(rng.below(5))"
            }
            let count = !ordered && rng.chance(15)
            if count { text = text.replacingOccurrences(of: "SELECT *", with: "SELECT COUNT(*) AS n") }
            guard case .select(let s) = try DQL.parse(text) else { continue }
            guard let plan = try? planner.plan(s, context: context),
                  let full = try? SelectQuery(s, context: context).run(docs) else { continue }
            expected[q] = (text, count ? .count : .rows(ordered: ordered), plan, full)
            let parameters = plan.parameters.map { p -> String in
                if case .bigint(let i) = p { return String(i) }
                return quote(p.text)
            }
            script += "\\echo ===Q\(q)\nPREPARE q\(q) AS \(plan.sql);\nEXECUTE q\(q)(\(parameters.joined(separator: ", ")));\nDEALLOCATE q\(q);\n"
        }
        #expect(expected.count > 1000)
        #expect(expected.values.filter { $0.plan.residual != nil }.count > 100)

        let output = try runPsql(script)
        var rows: [Int: [String]] = [:]
        var current: Int?
        for line in output.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("===Q"), let q = Int(line.dropFirst(4)) { current = q; rows[q] = []; continue }
            if let q = current { rows[q, default: []].append(String(line)) }
        }
        var failures = 0
        for (q, entry) in expected.sorted(by: { $0.key < $1.key }) {
            guard let got = rows[q] else { Issue.record("no output for \(entry.text)"); failures += 1; continue }
            if case .count = entry.plan.output {
                guard got.count == 1, let n = Int64(got[0]) else { Issue.record("bad count output for \(entry.text)"); continue }
                #expect(entry.plan.countRows(n) == entry.want, "\(entry.text)")
                continue
            }
            // jsonb prints 9007199254740992.0 as an integer, so documents are compared by id, not value.
            let fetched = got.compactMap { try? JSON.parse($0) }
            #expect(fetched.count == got.count, "unparsable row for \(entry.text)")
            guard let result = try? entry.plan.memoryQuery.run(fetched) else { Issue.record("memory stage failed: \(entry.text)"); continue }
            switch entry.mode {
            case .count:
                #expect(result == entry.want, "\(entry.text)")
            case .rows(let ordered):
                let ids = result.compactMap { $0["_id"]?.stringValue }, want = entry.want.compactMap { $0["_id"]?.stringValue }
                #expect(ordered ? ids == want : ids.sorted() == want.sorted(), "\(entry.text)\n\(entry.plan.sql)")
            }
        }
        #expect(failures == 0)
    }

    func runPsql(_ script: String) throws -> String {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("dql-diff-\(UInt64.random(in: 0...UInt64.max)).sql")
        try script.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let args = (ProcessInfo.processInfo.environment["DQL_TEST_PSQL"] ?? "").split(separator: " ").map(String.init)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["psql", "-X", "-q"] + args + ["-f", file.path]
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "psql failed: \(String(decoding: errors, as: UTF8.self))")
        return String(decoding: data, as: UTF8.self)
    }
}
