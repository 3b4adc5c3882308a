@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Postgres
import Testing
import Values

/// The `bigpeer keys` CLI as scripts use it, and independent clients (curl, Python `requests`)
/// against a server with auth on.
@Suite struct CLIAndClientsTests {
    @Test func keysCreateListRevokeFromTheCommandLine() async throws {
        let exe = try ServerProcess.locateBinary()
        try await withServer({ $0.authCacheTTL = .milliseconds(200) }) { s in
            let db = ["--database-url", conninfo(s.database.configuration)]
            let created = try await TestCommand.run(exe, ["keys", "create", "--description", "ci deploy", "--expires-in", "30d",
                                               "--read", "cars,people", "--write", "cars"] + db)
            #expect(created.status == 0, "\(created.err)")
            let lines = created.out.split(separator: "\n")
            let key = String(try #require(lines.last))
            #expect(APIKeyToken(parsing: key) != nil, "last line: \(key)")
            #expect(created.out.contains("read:        cars,people"))
            #expect(!created.err.contains(key))

            // The key works as created, with its scopes.
            #expect(try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})", key: key).status == 200)
            #expect(try await s.execute("SELECT * FROM people", key: key).status == 200)
            #expect(try await s.execute("INSERT INTO people DOCUMENTS ({'_id': 'p'})", key: key).status == 403)

            // Stored hashed: neither the list nor the table holds the key.
            let id = try #require(APIKeyToken(parsing: key)).id
            let listed = try await TestCommand.run(exe, ["keys", "list"] + db)
            #expect(listed.status == 0, "\(listed.err)")
            #expect(listed.out.contains(id))
            #expect(listed.out.contains("ci deploy"))
            #expect(listed.out.contains("active"))
            #expect(!listed.out.contains(key))
            let rows = try await s.service.pool.query("SELECT key_sha256, encode(key_sha256, 'hex') FROM api_keys")
            #expect(rows.count == 1)
            #expect(try rows[0].decode(1, as: String.self) == APIKeyToken.hex(try #require(APIKeyToken(parsing: key)).sha256))

            let revoked = try await TestCommand.run(exe, ["keys", "revoke", id] + db)
            #expect(revoked.status == 0, "\(revoked.err)")
            #expect(try await eventually { try await s.execute("SELECT * FROM cars", key: key).status == 401 })  // past the 200 ms cache
            #expect(try await TestCommand.run(exe, ["keys", "list"] + db).out.contains("revoked"))
            #expect(try await TestCommand.run(exe, ["keys", "revoke", "ffffffffffffffff"] + db).status != 0)

            // Bad arguments are refused before touching the database.
            for bad in [["--expires-in", "30x", "--read-all"], ["--expires-in", "0d", "--read-all"], ["--expires-in", "30d"],
                        ["--expires-in", "30d", "--read", "a", "--read-all"], ["--expires-in", "99999d", "--read-all"]] {
                let r = try await TestCommand.run(exe, ["keys", "create", "--description", "x"] + bad + db)
                #expect(r.status != 0, "\(bad)")
            }
        }
    }

    /// `keys create --time-limit RATE:BURST` stores the key's share (shown by `keys list`); bad
    /// values are refused, and the table refuses what the command would (NaN among them).
    @Test func keysCreateTimeLimitFromTheCommandLine() async throws {
        let exe = try ServerProcess.locateBinary()
        try await withServer { s in
            let db = ["--database-url", conninfo(s.database.configuration)]
            let created = try await TestCommand.run(exe, ["keys", "create", "--description", "partner", "--expires-in", "1d",
                                                          "--read-all", "--time-limit", "0.25:2"] + db)
            #expect(created.status == 0, "\(created.err)")
            #expect(created.out.contains("time limit:  0.25 s/s, burst 2.0 s"), "\(created.out)")
            _ = try await TestCommand.run(exe, ["keys", "create", "--description", "ours", "--expires-in", "1d", "--read-all"] + db)
            let listed = try await TestCommand.run(exe, ["keys", "list"] + db)
            let rows = listed.out.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false) }
            #expect(rows.first?[10] == "TIME LIMIT")
            #expect(rows.dropFirst().map { "\($0[11])=\($0[10])" }.sorted() == ["ours=-", "partner=0.25 s/s, burst 2.0 s"], "\(listed.out)")
            for bad in ["0:2", "-1:2", "0.5:0.5", "nan:2", "0.5:inf", "x", "2000000:2", "1:2:3", ""] {
                let r = try await TestCommand.run(exe, ["keys", "create", "--description", "x", "--expires-in", "1d", "--read-all", "--time-limit", bad] + db)
                #expect(r.status != 0 && r.err.contains("--time-limit"), "\(bad): \(r.err)")
            }
            for (rate, burst) in [("'NaN'", "1"), ("1", "'Infinity'"), ("1", "NULL"), ("0", "1")] {
                await #expect(throws: (any Error).self, "\(rate):\(burst)") {
                    _ = try await s.service.pool.query(PostgresQuery(unsafeSQL: "UPDATE api_keys SET time_limit_rate = \(rate), time_limit_burst = \(burst)"))
                }
            }
        }
    }

    @Test func curlAndPythonRequestsSeeTheSameAuthRules() async throws {
        try await withServer { s in
            let key = try await s.newKey(read: .only(["cars"]), write: .only(["cars"]))
            let url = s.base + "/api/v4/store/execute"
            // curl: no key, then a write and a read with the key.
            let none = try await TestCommand.run("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url, "-d", #"{"statement":"SELECT * FROM cars"}"#])
            #expect(none.out == "401")
            let ins = try await TestCommand.run("/usr/bin/curl", ["-s", "-X", "POST", url, "-H", "Authorization: Bearer \(key)",
                                                       "-d", #"{"statement":"INSERT INTO cars DOCUMENTS (:d)","args":{"d":{"_id":"k","color":"red"}}}"#])
            #expect(try JSON.parse(Array(ins.out.utf8)) == ["transactionId": 1, "queryType": "insert", "items": [], "mutatedDocumentIds": ["k"],
                                                          "warnings": [], "totalWarningsCount": 0])
            let find = try await TestCommand.run("/usr/bin/curl", ["-s", "-X", "POST", s.base + "/api/v4/store/find", "-H", "Authorization: Bearer \(key)",
                                                        "-d", #"{"collection":"cars","query":"color == 'red'"}"#])
            #expect(try JSON.parse(Array(find.out.utf8)) == ["documents": [["id": "k", "fields": ["_id": "k", "color": "red"]]], "txnId": 1])

            // Python requests: 403 for another collection, CBOR decoded by hand (major types checked).
            let script = """
                import sys, requests
                base, key = sys.argv[1], sys.argv[2]
                h = {"Authorization": "Bearer " + key}
                r = requests.post(base + "/api/v4/store/execute", json={"statement": "SELECT * FROM people"}, headers=h)
                assert r.status_code == 403, r.status_code
                assert r.headers["WWW-Authenticate"].startswith("Bearer"), r.headers
                assert r.json()["queryType"] == "unknown" and "people" in r.json()["error"]["description"], r.text
                r = requests.post(base + "/api/v4/store/count", json={"collection": "cars"}, headers=h)
                assert r.status_code == 200 and r.json()["count"] == 1, r.text
                r = requests.post(base + "/api/v4/store/count", json={"collection": "cars"}, headers=dict(h, Accept="application/cbor"))
                assert r.headers["Content-Type"] == "application/cbor", r.headers
                b = r.content
                assert b[0] == 0xA2, b  # map of 2 pairs
                assert b"count" in b and b"txnId" in b, b
                r = requests.post(base + "/api/v4/store/count", json={"collection": "cars"}, headers={"Authorization": "Bearer bpk_nope"})
                assert r.status_code == 401, r.status_code
                print("ok")
                """
            let py = try await TestCommand.run("/usr/bin/env", ["python3", "-c", script, s.base, key])
            #expect(py.status == 0, "\(py.err)")
            #expect(py.out == "ok\n")
        }
    }

    @Test func serveInsecureDevWarnsLoudly() async throws {
        let exe = try ServerProcess.locateBinary()
        try await withServer { s in
            let log = NSTemporaryDirectory() + "bp-insecure-\(UInt64.random(in: 0...UInt64.max)).log"
            defer { unlink(log) }
            let pid = try TestCommand.spawn(exe, ["serve", "--insecure-dev", "--port", "0", "--threads", "1", "--db-connections", "2",
                                                  "--database-url", conninfo(s.database.configuration)],
                                            stdoutPath: "/dev/null", stderrPath: log)
            var seen = ""
            _ = await eventually(within: .seconds(30)) {
                seen = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                return seen.contains("BigPeer is listening")
            }
            kill(pid, SIGINT)
            _ = await TestCommand.wait(pid)
            #expect(seen.contains("critical"))
            #expect(seen.contains("AUTHENTICATION IS DISABLED (--insecure-dev)"))
        }
    }
}
