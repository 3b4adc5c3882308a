// The `bigpeer peer` CLI (the built binary): --offline --execute, then --sync-once between two data
// directories through a real server; failures with a clear message; and kill -9 during writes
// loses nothing whose result was printed.
import BigPeerTestSupport
import Foundation
import Glibc
@testable import SmallPeer
import Sockets
import TestRandomness
import Testing
import Values

@Suite("bigpeer peer CLI", .serialized)
struct PeerCommandTests {
    static func run(_ args: [String], stdin: String? = nil) async throws -> TestCommand.Output {
        let binary = try bigpeerBinary()
        let start = ContinuousClock.now
        defer { print("bigpeer peer \(args.filter { $0.hasPrefix("--") }.joined(separator: " ")): \(ContinuousClock.now - start)") }
        return try await TestCommand.run(binary, ["peer"] + args, stdin: stdin.map { Array($0.utf8) })
    }

    static func lines(_ text: String) throws -> [Value] {
        try text.split(separator: "\n").map { try JSON.parse(String($0)) }
    }

    @Test func offlineExecute_thenSyncOnce_carriesTheDocumentToASecondPeer() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        try await TestServer.with { server in
            let offline = try await Self.run(["--data", dirA.path, "--offline",
                                              "--execute", "INSERT INTO cars DOCUMENTS ({'_id': 'cli-1', 'color': 'red'})",
                                              "--execute", "SELECT * FROM cars"])
            #expect(offline.status == 0, "\(offline.err)")
            let printed = try Self.lines(offline.out)
            #expect(printed.count == 2)
            #expect(printed.first?["mutatedDocumentIds"] == ["cli-1"])
            #expect(printed.last?["items"] == [["_id": "cli-1", "color": "red"]])

            let up = try await Self.run(["--data", dirA.path, "--url", server.url, "--key", server.key,
                                         "--subscribe", "SELECT * FROM cars", "--sync-once"])
            #expect(up.status == 0, "\(up.err)")
            #expect(try await server.items("SELECT * FROM cars") == [["_id": "cli-1", "color": "red"]])

            let down = try await Self.run(["--data", dirB.path, "--url", server.url, "--key", server.key,
                                           "--subscribe", "SELECT * FROM cars WHERE color = 'red'", "--sync-once"])
            #expect(down.status == 0, "\(down.err)")
            let changes = try Self.lines(down.out)
            #expect(changes.contains { $0["event"] == "upsert" && $0["_id"] == "cli-1" && $0["value"]?["color"] == "red" })
            let local = try await Self.run(["--data", dirB.path, "--offline", "--execute", "SELECT * FROM cars"])
            #expect(try Self.lines(local.out).first?["items"] == [["_id": "cli-1", "color": "red"]])
        }
    }

    /// `--jwt-file`: the token comes from a file (re-read while the peer runs; the refresh in the
    /// session is `SyncClient.updateCredentials`, tested in SmallPeerServerTests); an unreadable
    /// file is a clear error.
    @Test func jwtFile_providesTheToken() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'from-file', 'color': 'red'})")
            let tokenPath = dir.path + "/token"
            let token = try server.jwt(read: ["cars"], write: ["cars"])
            guard let f = fopen(tokenPath, "w") else { Issue.record("cannot write \(tokenPath)"); return }
            fputs(token + "\n", f)
            fclose(f)
            let ok = try await Self.run(["--data", dir.path + "/peer", "--url", server.url, "--jwt-file", tokenPath,
                                         "--subscribe", "SELECT * FROM cars", "--sync-once"])
            #expect(ok.status == 0, "\(ok.err)")
            #expect(try Self.lines(ok.out).contains { $0["_id"] == "from-file" })
            let missing = try await Self.run(["--data", dir.path + "/peer", "--url", server.url, "--jwt-file", dir.path + "/absent", "--sync-once"])
            #expect(missing.status != 0)
            #expect(missing.err.contains("cannot read a JWT"), "\(missing.err)")
        }
    }

    @Test func failures_exitNonZero_withAClearMessage() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let badKey = try await Self.run(["--data", dir.path, "--url", server.url, "--key", "wrong", "--sync-once", "--timeout", "10"])
            #expect(badKey.status != 0)
            #expect(badKey.err.contains("refused") && badKey.err.contains("4001"), "\(badKey.err)")
        }
        let noServer = try await Self.run(["--data", dir.path, "--url", "ws://127.0.0.1:1", "--sync-once", "--timeout", "10"])
        #expect(noServer.status != 0)
        #expect(noServer.err.contains("cannot connect"), "\(noServer.err)")
        let badDQL = try await Self.run(["--data", dir.path, "--offline", "--execute", "SELEC 1"])
        #expect(badDQL.status != 0)
        #expect(badDQL.err.contains("syntax error at 1:1"), "\(badDQL.err)")
        let usage = try await Self.run(["--data", dir.path, "--sync-once"])
        #expect(usage.status != 0)
    }

    /// `--ble` where there is no Bluetooth (this machine: no AF_BLUETOOTH), dialling a given URL or
    /// scanning for a node: the one documented line, a failure exit.
    @Test(arguments: [["--url", "l2cap://00:11:22:33:44:55/129"], ["--ble-name", "ship", "--ble-adapter", "hci1"]])
    func ble_withoutBluetooth_failsWithTheUnavailableLine(target: [String]) async throws {
        guard let unavailable = PacketSockets.bluetoothUnavailable() else { return }  // a machine with Bluetooth: nothing to check
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let ble = try await Self.run(["--data", dir.path, "--ble"] + target + ["--sync-once"])
        #expect(ble.status != 0)
        #expect(ble.err.trimmingCharacters(in: .whitespacesAndNewlines) == "bigpeer peer: \(unavailable)", "\(ble.err)")
        #expect(ble.err.contains("BLE unavailable: "))
    }

    @Test func bleScanOptions_needBLEWithoutURL() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        for args in [["--ble-name", "ship", "--offline"], ["--ble", "--ble-name", "ship", "--url", "l2cap://00:11:22:33:44:55/129"],
                     ["--ble", "--ble-adapter", "usb0"]] {
            let r = try await Self.run(["--data", dir.path] + args)
            #expect(r.status != 0 && r.err.contains("--ble-adapter"), "\(args): \(r.err)")
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func interactive_printsIncomingChanges_andRunsStdinLocally() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'first', 'color': 'red'})")
            let child = try InteractiveChild(try bigpeerBinary(), ["peer", "--data", dir.path, "--url", server.url, "--key", server.key,
                                                                  "--subscribe", "SELECT * FROM cars"])
            // The initial sync arrives after the subscription's observer started: printed as a change.
            let first = try JSON.parse(await child.readLine())
            #expect(first["event"] == "upsert" && first["_id"] == "first")
            // A live REST write is printed as it arrives.
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'second', 'color': 'blue'})")
            let second = try JSON.parse(await child.readLine())
            #expect(second["_id"] == "second" && second["value"]?["color"] == "blue")
            // A statement from stdin runs on the local store.
            child.send("SELECT COUNT(*) AS n FROM cars\n")
            let result = try JSON.parse(await child.readLine())
            #expect(result["queryType"] == "select")
            #expect(result["items"] == [["n": 2]])
            #expect(await child.finish() == 0)
        }
    }

    @Test func prompt_runsStatementsFromStdin() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let out = try await Self.run(["--data", dir.path, "--offline"], stdin: """
            INSERT INTO t DOCUMENTS ({'_id': 'x', 'v': 1})
            UPDATE t APPLY v INCREMENT BY 2 WHERE _id = 'x'
            SELECT v FROM t
            """)
        #expect(out.status == 0, "\(out.err)")
        guard case .array(let items)? = try Self.lines(out.out).last?["items"] else { Issue.record("no items: \(out.out)"); return }
        // APPLY on a field that is not yet a COUNTER starts the counter at 0 (docs/CRDT.md), as on the server.
        #expect(items.first?["v"]?.doubleValue == 2)
    }

    @Test(arguments: [UInt64(1), 2, 3])
    func killDashNine_losesNothingWhoseResultWasPrinted(seed: UInt64) async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        var rng = SeededRandom(seed: seed)
        let statements = (0..<2000).map { "INSERT INTO t DOCUMENTS ({'_id': 'k\($0)', 'n': \($0)})" }.joined(separator: "\n") + "\n"
        let inPath = dir.sub("stdin"), outPath = dir.sub("stdout"), errPath = dir.sub("stderr")
        _ = FileManager.default.createFile(atPath: inPath, contents: Data(statements.utf8))
        let binary = try bigpeerBinary()
        let pid = try TestCommand.spawn(binary, ["peer", "--data", dir.sub("peer"), "--offline"], stdinPath: inPath,
                                        stdoutPath: outPath, stderrPath: errPath)
        try await Task.sleep(for: .milliseconds(150 + rng.below(400)))
        kill(pid, SIGKILL)
        let status = await TestCommand.wait(pid)
        #expect(status == 128 + SIGKILL, "the peer finished before the kill; raise the statement count")
        let printed = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        let acknowledged = printed.split(separator: "\n").filter { $0.hasPrefix("{") && $0.hasSuffix("}") }.count
        let peer = try openPeer(dir.sub("peer"))
        let stored = try peer.execute("SELECT n FROM t ORDER BY n").items.compactMap { $0["n"]?.int64Value }
        // Every printed result is stored; at most the one write in flight at the kill is extra.
        #expect(stored.count >= acknowledged && stored.count <= acknowledged + 1, "printed \(acknowledged), stored \(stored.count)")
        #expect(stored == (0..<Int64(stored.count)).map { $0 })
    }
}
