import BigPeerTestSupport
import Foundation
import Glibc
import Testing

/// `bigpeer config` and `serve --config` as an operator runs them: exit statuses and output.
@Suite struct ConfigCommandTests {
    func bigpeer(_ arguments: [String], environment: [String: String] = [:]) async throws -> TestCommand.Output {
        try await TestCommand.run(try ServerProcess.locateBinary(), arguments, environment: environment)
    }

    @Test func checkExitsZeroForAValidFileAndOneWithTheReason() async throws {
        let good = ServeConfigurationTests.writeTemporary("port: 9000\nlog-level: notice\n")
        let bad = ServeConfigurationTests.writeTemporary("port: 9000\n\nlog-levle: notice\n")
        defer { unlink(good); unlink(bad) }
        let ok = try await bigpeer(["config", "check", good])
        #expect(ok.status == 0)
        #expect(ok.out == "\(good): ok (2 options set)\n")
        let refused = try await bigpeer(["config", "check", bad])
        #expect(refused.status == 1)
        #expect(refused.err == "error: \(bad):3: unknown key 'log-levle' (did you mean 'log-level'?)\n")
    }

    @Test func serveRefusesABadFileOrVariableBeforeStarting() async throws {
        let bad = ServeConfigurationTests.writeTemporary("port: eighty\n")
        defer { unlink(bad) }
        let file = try await bigpeer(["serve", "--config", bad])
        #expect(file.status == 1)
        #expect(file.err == "error: \(bad):1: 'port' must be an integer, not \"eighty\"\n")
        let variable = try await bigpeer(["serve"], environment: ["BIGPEER_MAX_SYNC_SESSIONS": "lots"])
        #expect(variable.status == 1)
        #expect(variable.err == "error: BIGPEER_MAX_SYNC_SESSIONS must be an integer, not \"lots\"\n")
    }

    @Test func printShowsSourcesAndNoSecret() async throws {
        let file = ServeConfigurationTests.writeTemporary("port: 9000\nauth-webhook:\n  - acme=https://hooks.example/auth?token=t0ps3cret\n")
        defer { unlink(file) }
        let out = try await bigpeer(["config", "print", "--config", file, "--host", "0.0.0.0"],
                                    environment: ["DATABASE_URL": "postgresql://bigpeer:hunter2@db:5432/bigpeer", "BIGPEER_UPSTREAM_KEY": "bpk_id_s3cretkey", "BIGPEER_UPSTREAM": "wss://cloud.example/api/v4/sync",
                                                  "BIGPEER_PROT": "1"])
        #expect(out.status == 0)
        let lines = out.out.split(separator: "\n").map(String.init)
        #expect(lines.contains("port: 9000  # file \(file):1"))
        #expect(lines.contains("host: \"0.0.0.0\"  # command line"))
        #expect(lines.contains("database-url: \"postgresql://bigpeer:***@db:5432/bigpeer\"  # environment DATABASE_URL"))
        #expect(lines.contains("upstream-key: \"***\"  # environment BIGPEER_UPSTREAM_KEY"))
        #expect(lines.contains("  - \"acme=https://hooks.example/auth?token=***\""))
        #expect(!out.out.contains("hunter2") && !out.out.contains("s3cret") && !out.out.contains("t0ps3cret"))
        #expect(out.err == "warning: BIGPEER_PROT is set but no option reads it (did you mean BIGPEER_PORT?)\n")
    }

    @Test func peerReadsItsOwnFile() async throws {
        let store = "/tmp/bigpeer-peer-config-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let file = ServeConfigurationTests.writeTemporary("data: \(store)\noffline: true\nexecute:\n  - \"INSERT INTO cars DOCUMENTS ({'_id': 'a'})\"\n")
        let serveFile = ServeConfigurationTests.writeTemporary("port: 9000\n")
        defer { unlink(file); unlink(serveFile); try? FileManager.default.removeItem(atPath: store) }
        let ok = try await bigpeer(["config", "check", "--peer", file])
        #expect(ok.status == 0)
        #expect(ok.out == "\(file): ok (3 options set)\n")
        let refused = try await bigpeer(["config", "check", "--peer", serveFile])
        #expect(refused.status == 1)
        #expect(refused.err.contains("unknown key 'port'"), "\(refused.err)")
        // The file gives --data, --offline and --execute; a variable and the command line add to it.
        let run = try await bigpeer(["peer", "--config", file, "--execute", "SELECT COUNT(*) AS n FROM cars"], environment: ["BIGPEER_PEER_NAME": "cli"])
        #expect(run.status == 0, "\(run.err)")
        #expect(run.out.contains(#""n":0"#), "the command line's --execute replaced the file's: \(run.out)")
    }

    @Test func referenceIsTheDocumentedTable() async throws {
        let out = try await bigpeer(["config", "reference"])
        #expect(out.status == 0)
        #expect(out.out.hasPrefix("| Key | Environment | Type | Default | Meaning |\n"))
    }
}
