import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Testing
import Values

/// A cloud with auth on: the node presents an API key; what the key may not write is refused per
/// entry and counted, without holding up the rest; a bad key leaves the node `refused`.
@Suite(.serialized) struct UpstreamCredentialsTests {
    @Test func scopedKey_uploadsWhatItMayWrite_andReportsTheRest_andABadKeyIsRefused() async throws {
        try await withDatabases(3) { urls, http, processes in
            func makeKey(_ scopes: [String]) async throws -> String { try await createAPIKey(urls[0], scopes, description: "ship-7") }
            let key = try await makeKey(["--read", "cars", "--write", "cars"])
            let admin = try await makeKey(["--read-all", "--write-all"])
            let cloud = try await Server.start(urls[0], http: http, processes: processes, secure: true)
            // The key may not read secrets: that subscription is refused, the other one goes on.
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM cars", "SELECT * FROM secrets"],
                                              extra: ["--upstream-key", key], http: http, processes: processes)
            try await node.execute("INSERT INTO secrets DOCUMENTS ({'_id': 's1', 'pin': 1234})")
            try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})")
            let cloudRest = RESTClient(http: http, port: cloud.port, key: admin)
            #expect(try await eventually(within: .seconds(30)) {
                try await cloudRest.execute("SELECT * FROM cars").body["items"]?.arrayValue?.count == 1
            }, "the car went up")
            #expect(await eventually(within: .seconds(30)) {
                guard let s = try? await node.upstreamStatus() else { return false }
                return s["rejectedUploads"] == 1 && s["pendingUploads"]?["changes"] == 0
            }, "the secret was refused, counted, and did not hold up the queue")
            let status = try await node.upstreamStatus()
            #expect(status["lastRejection"]?.stringValue?.contains("not permitted to write collection") == true, "\(status)")
            #expect(status["state"] == "connected")
            #expect(status["subscriptionErrors"]?.objectValue?.values.first?.stringValue?.contains("not permitted to read collection") == true, "\(status)")
            #expect(status["subscriptions"]?.arrayValue?.map { $0["query"] } == ["SELECT * FROM cars"], "\(status)")
            #expect(try await cloudRest.execute("SELECT * FROM secrets").body["items"]?.arrayValue?.isEmpty == true)

            let refused = try await Server.start(urls[2], upstreamPort: cloud.port, extra: ["--upstream-key", "bpk_not_a_real_key"],
                                                 http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) {
                (try? await refused.upstreamStatus())?["state"] == "refused"
            })
            let why = try await refused.upstreamStatus()["lastError"]?.stringValue ?? ""
            #expect(why.contains("4001"), "\(why)")
        }
    }

    /// The cloud applies a node's uploads under the node's key's write rules (docs/AUTH.md, "Write
    /// rules"): a car outside them is refused per entry, with the reason, and the others go up.
    @Test func writeRulesOfTheNodesKey_refuseOneUpload_andTheRestGoUp() async throws {
        try await withDatabases(2) { urls, http, processes in
            let key = try await createAPIKey(urls[0], ["--read", "cars", "--write", "cars: color = 'red'"], description: "ship-8")
            let admin = try await createAPIKey(urls[0], ["--read-all", "--write-all"])
            let cloud = try await Server.start(urls[0], http: http, processes: processes, secure: true)
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM cars"],
                                              extra: ["--upstream-key", key], http: http, processes: processes)
            try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'}), ({'_id': 'c2', 'color': 'blue'}), ({'_id': 'c3', 'color': 'red'})")
            #expect(await eventually(within: .seconds(30)) {
                guard let s = try? await node.upstreamStatus() else { return false }
                return s["rejectedUploads"] == 1 && s["pendingUploads"]?["changes"] == 0
            }, "the blue car was refused and did not hold up the queue")
            let status = try await node.upstreamStatus()
            #expect(status["lastRejection"]?.stringValue?.contains("not permitted by the write rules of collection cars") == true, "\(status)")
            let cars = try await RESTClient(http: http, port: cloud.port, key: admin).execute("SELECT * FROM cars ORDER BY _id")
            #expect(cars.body["items"]?.arrayValue?.compactMap { $0["_id"]?.stringValue } == ["c1", "c3"], "\(cars.body)")
        }
    }

    /// A node on a JWT file: a renewed token written to the file reaches the running session with
    /// `auth`; its narrower permissions apply from then on, without a reconnection.
    @Test func aRenewedJWTInTheFile_reachesTheRunningSession() async throws {
        try await withDatabases(2) { urls, http, processes in
            let jwt = try JWTFiles()
            defer { jwt.cleanup() }
            let (secret, tokenFile) = (jwt.secret, jwt.tokenFile)
            func mint(write: String) async throws -> String { try await jwt.mint(write: write) }
            try (try await mint(write: "cars,notes") + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
            let cloud = try await Server.start(urls[0], extra: ["--jwt-secret-file", secret], http: http, processes: processes, secure: true)
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, extra: ["--upstream-jwt-file", tokenFile], http: http, processes: processes)
            try await node.execute("INSERT INTO notes DOCUMENTS ({'_id': 'n1'})")
            #expect(await eventually(within: .seconds(30)) { (try? await node.upstreamStatus())?["uploadedChanges"] == 1 })

            // Renewed, narrower: cars only. The session takes it without reconnecting.
            try (try await mint(write: "cars") + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
            #expect(await eventually(within: .seconds(30)) { (try? await node.upstreamStatus())?["credentialRefreshes"] == 1 })
            try await node.execute("INSERT INTO notes DOCUMENTS ({'_id': 'n2'})")
            try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1'})")
            #expect(await eventually(within: .seconds(30)) {
                guard let s = try? await node.upstreamStatus() else { return false }
                return s["uploadedChanges"] == 2 && s["rejectedUploads"] == 1 && s["pendingUploads"]?["changes"] == 0
            }, "the car went up, the note was refused under the new token")
            let status = try await node.upstreamStatus()
            #expect(status["sessions"] == 1, "no reconnection: \(status)")
            #expect(status["lastRejection"]?.stringValue?.contains("not permitted to write collection") == true, "\(status)")
        }
    }

    /// The node asks for `renew`: told its JWT expires soon, it reads the file at once and sends
    /// the new token with `auth`. The new token is written with the old modification time, so
    /// neither the change check nor the 30 s re-read can find it before the first token expires
    /// (without `renew` the session would end with 4001 and a second one start).
    @Test func aRenewNotice_makesTheNodeReadItsFileAndSendAuth() async throws {
        try await withDatabases(2) { urls, http, processes in
            let jwt = try JWTFiles()
            defer { jwt.cleanup() }
            let (secret, tokenFile) = (jwt.secret, jwt.tokenFile)
            func mint(ttl: Int) async throws -> String { try await jwt.mint(write: "*", ttl: ttl) }
            // No leeway: the session ends at the token's `exp`, before the node's 30 s re-read.
            let cloud = try await Server.start(urls[0], extra: ["--jwt-secret-file", secret, "--jwt-leeway", "0"], http: http, processes: processes, secure: true)
            // 28 s: `renew` comes 10 % of what is left at the handshake before the end (2.8 s when the
            // node starts at once, less on a loaded machine); still before the node's 30 s re-read.
            try (try await mint(ttl: 28) + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, extra: ["--upstream-jwt-file", tokenFile], http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) { (try? await node.upstreamStatus())?["state"] == "connected" })
            var before = stat()
            #expect(stat(tokenFile, &before) == 0)
            try (try await mint(ttl: 3600) + "\n").write(toFile: tokenFile, atomically: true, encoding: .utf8)
            var times = [before.st_atim, before.st_mtim]
            #expect(utimensat(AT_FDCWD, tokenFile, &times, 0) == 0, "the old modification time back")
            #expect(await eventually(within: .seconds(40)) { (try? await node.upstreamStatus())?["credentialRefreshes"] == 1 })
            try await Task.sleep(for: .seconds(5))  // past the first token's `exp`
            let status = try await node.upstreamStatus()
            #expect(status["sessions"] == 1, "no 4001 and no reconnection: \(status)")
            #expect(status["state"] == "connected", "\(status)")
        }
    }
}

/// A temporary directory with an HS256 secret (`secret`) and a place for the node's token
/// (`tokenFile`); `mint` makes a token of that secret with `bigpeer token`.
struct JWTFiles {
    let directory = NSTemporaryDirectory() + "upstream-jwt-\(UUID().uuidString)"
    var secret: String { directory + "/secret" }
    var tokenFile: String { directory + "/token" }
    let executable: String

    init() throws {
        executable = try ServerProcess.locateBinary()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try String(repeating: "s3cr3t-", count: 8).write(toFile: secret, atomically: true, encoding: .utf8)
    }

    func cleanup() { try? FileManager.default.removeItem(atPath: directory) }

    func mint(write: String, ttl: Int = 3600) async throws -> String {
        let r = try await TestCommand.run(executable, ["token", "--jwt-secret-file", secret, "--write", write, "--subject", "ship-7", "--ttl", "\(ttl)"])
        #expect(r.status == 0, "\(r.err)")
        return r.out.split(separator: "\n").last.map(String.init) ?? ""
    }
}
