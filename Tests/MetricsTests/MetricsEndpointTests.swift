import Foundation
import BigPeerServer
import BigPeerTestSupport
import Glibc
import HTTP
import Metrics
import Postgres
import Sockets
import Testing
import Values

/// A real `bigpeer serve` with `--metrics-port` and `--log-format json`: its exposition is
/// scraped over a socket, parsed strictly, checked by `promtool check metrics` where installed,
/// and its counters follow the requests sent; its log lines are JSON objects carrying the
/// request ids the responses returned.
@Suite struct MetricsEndpointTests {
    @Test func scrapedMetricsFollowRequestsAndLogsAreJSON() async throws {
        try await TestPostgres.withDatabase { db in
            let metricsPort = try LocalPostgres.freeLoopbackPort()
            // An unknown BIGPEER_ variable: its warning is a JSON log line like every other.
            var environment = ProcessInfo.processInfo.environment
            environment["BIGPEER_NOT_AN_OPTION"] = "1"
            let server = try await ServerProcess.start(arguments: [
                "--database-url", db.url, "--insecure-dev", "--metrics-port", String(metricsPort), "--log-format", "json"],
                environment: environment)
            defer { Task { await server.kill() } }
            let client = try HTTPClient()
            let base = "http://127.0.0.1:\(server.port)"
            func scrape() async throws -> (text: String, parsed: Exposition) {
                let r = try await client.execute(HTTPClientRequest(url: "http://127.0.0.1:\(metricsPort)/metrics"))
                #expect(r.status.code == 200)
                #expect(r.headers["Content-Type"] == MetricsRegistry.contentType)
                let parsed = try Exposition.parse(r.text)
                try parsed.check()
                return (r.text, parsed)
            }
            func healthz(_ parsed: Exposition) -> Double {
                parsed.value("bigpeer_http_requests_total", ["route": "/healthz", "method": "GET", "status": "2xx"]) ?? 0
            }

            // The public port does not serve the exposition.
            #expect(try await client.execute(HTTPClientRequest(url: base + "/metrics")).status.code == 404)

            let before = try await scrape().parsed
            for i in 0..<7 {
                let r = try await client.execute(HTTPClientRequest(url: base + "/healthz", headers: ["X-Request-ID": "probe-\(i)"]))
                #expect(r.headers["X-Request-ID"] == "probe-\(i)")
            }
            let generated = try await client.execute(HTTPClientRequest(url: base + "/healthz", headers: ["X-Request-ID": "bad id with spaces"]))
            let generatedID = try #require(generated.headers["X-Request-ID"])
            #expect(generatedID != "bad id with spaces" && !generatedID.isEmpty)
            _ = try await client.execute(HTTPClientRequest(url: base + "/no/such/path-12345"))
            let write = try await client.execute(HTTPClientRequest(method: .POST, url: base + "/api/v4/store/execute", headers: ["Content-Type": "application/json"],
                                                                   body: Array(#"{"statement":"INSERT INTO cars DOCUMENTS ({_id: 'a', n: 1})"}"#.utf8)))
            #expect(write.status.code == 200)
            for _ in 0..<2 {  // point reads
                let read = try await client.execute(HTTPClientRequest(method: .POST, url: base + "/api/v4/store/execute", headers: ["Content-Type": "application/json"],
                                                                      body: Array(#"{"statement":"SELECT * FROM cars WHERE _id = 'a'"}"#.utf8)))
                #expect(read.status.code == 200)
            }
            let missing = try await client.execute(HTTPClientRequest(url: base + "/api/v4/attachments/no-such-attachment-777"))

            let (text, after) = try await scrape()
            #expect(healthz(after) - healthz(before) == 8)
            let unmatched = ["route": "(unmatched)", "method": "GET", "status": "4xx"]
            #expect(before.value("bigpeer_http_requests_total", unmatched) == 1, "the public port's 404 for /metrics")
            #expect(after.value("bigpeer_http_requests_total", unmatched) == 2)
            #expect(!text.contains("path-12345"), "raw paths never become labels")
            #expect(after.value("bigpeer_http_requests_total", ["route": "/api/v4/store/execute", "method": "POST", "status": "2xx"]) == 3)
            let missingClass = "\(missing.status.code / 100)xx"
            #expect(after.value("bigpeer_http_requests_total", ["route": "/api/v4/attachments/:id", "method": "GET", "status": missingClass]) == 1)
            #expect(!text.contains("no-such-attachment-777"))
            #expect(after.value("bigpeer_http_request_duration_seconds_count", ["route": "/healthz", "method": "GET"]) == healthz(after))
            #expect((after.value("bigpeer_write_batch_statements_count") ?? 0) >= 1)
            #expect((after.value("bigpeer_db_pool_acquire_seconds_count") ?? 0) >= 1)
            #expect((after.value("bigpeer_http_received_bytes_total") ?? 0) > (before.value("bigpeer_http_received_bytes_total") ?? 0))
            #expect((after.value("bigpeer_http_sent_bytes_total") ?? 0) > 0)
            #expect((after.value("bigpeer_change_log_head") ?? 0) >= 1)
            #expect((after.value("process_resident_memory_bytes") ?? 0) > 1_000_000)
            #expect((after.value("process_open_fds") ?? 0) > 3)
            #expect((after.value("process_start_time_seconds") ?? 0) > 1_600_000_000)
            // Every declared family is announced with its type, and nothing undeclared appears.
            for family in ServiceMetrics.all { #expect(after.types[family.name] == family.type.rawValue, "\(family.name)") }
            #expect(Set(after.types.keys) == Set(ServiceMetrics.all.map(\.name)))
            try Promtool.check(text)

            // The access log reaches the output within a sweep; every line is one JSON object.
            var lines: [Value] = []
            _ = try await eventually(within: .seconds(20)) {
                lines = server.log().split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
                return lines.contains { $0["request_id"] == .string("probe-6") }
            }
            let access = try #require(lines.first { $0["request_id"] == .string("probe-3") })
            #expect(access["message"] == .string("request") && access["path"] == .string("/healthz") && access["status"] == .int(200))
            #expect(access["level"] == .string("info") && access["label"] == .string("bigpeer.access"))
            if case .string(let time) = access["time"] { #expect(time.hasSuffix("Z") && time.count == 24) } else { Issue.record("no time") }
            #expect(lines.contains { $0["request_id"] == .string(generatedID) })
            let raw = server.log().split(separator: "\n").filter { !$0.isEmpty }
            #expect(raw.count == lines.count, "every log line is JSON")
            #expect(lines.contains { $0["level"] == .string("warning")
                && $0["message"]?.stringValue?.hasPrefix("BIGPEER_NOT_AN_OPTION is set but no option reads it") == true })
        }
    }
}

/// `promtool check metrics` (Debian `prometheus`) on an exposition. Absent: the check is skipped
/// unless BIGPEER_REQUIRE_PROMTOOL=1 (scripts/metrics-check.sh installs it and sets that).
enum Promtool {
    struct Failed: Error, CustomStringConvertible { let description: String }

    static func check(_ exposition: String) throws {
        let candidates: [String] = ["/usr/bin/promtool", "/usr/local/bin/promtool"]
        let path = candidates.first { Glibc.access($0, X_OK) == 0 }
        guard let path else {
            if getenv("BIGPEER_REQUIRE_PROMTOOL").map({ String(cString: $0) }) == "1" { throw Failed(description: "promtool is not installed") }
            return
        }
        let directory = try TemporaryDirectory("bigpeer-promtool")
        let input = try directory.write("metrics.txt", exposition)
        let output = input + ".out"
        let status = system("'\(path)' check metrics < '\(input)' > '\(output)' 2>&1")
        let said = FileBytes.read(output).map { String(decoding: $0, as: UTF8.self) } ?? ""
        // promtool exits 0 with lint findings printed, 3 on lint problems, 1 on a parse error.
        guard status == 0, said.isEmpty else { throw Failed(description: "promtool check metrics (status \(status)): \(said)") }
    }
}
