import ArgumentParser
import Auth
import Foundation
import Glibc
import HTTP
import Sockets
import SyncProtocol
import Synchronization
import Values
import WebSocket

/// `bigpeer bench sync ...`: the sync measurements of docs/PERFORMANCE.md against a running server
/// (Benchmarks/sync.sh starts one, seeds it and runs the reference next to these).
struct SyncBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Sync benchmarks against a running server: initial sync, fan-out latency, idle peers, update size.",
        subcommands: [Initial.self, Fanout.self, Idle.self, UpdateSize.self])

    struct Target: ParsableArguments {
        @Option(help: "Server base URL (numeric host).") var url = "ws://127.0.0.1:8080"
        @Option(help: "API key with read and write access.") var key: String
        @Option(help: "Event-loop threads for the peers.") var threads = 1
        @Option(name: .customLong("sync-url"), help: "Where the peers connect instead of --url's /api/v4/sync, e.g. tcp://HOST:PORT for a LAN peer link (bigpeer serve --lan).")
        var syncURL: String?

        /// The peers' sync URL and the REST base URL.
        func endpoint() throws -> (sync: String, rest: String) {
            guard let u = WebSocketURL(url + "/api/v4/sync"), !u.secure else { throw ValidationError("--url must be ws://HOST:PORT with a numeric host") }
            return (syncURL ?? url + "/api/v4/sync", "http://\(u.host):\(u.port)")
        }

        /// Runs one REST statement (the writes whose fan-out is measured).
        func execute(_ http: HTTPClient, _ base: String, _ statement: String, _ args: [String: Value]) async throws {
            var h = HTTPHeaders()
            h.add("Authorization", "Bearer \(key)")
            h.add("Content-Type", "application/json")
            let r = try await http.execute(HTTPClientRequest(method: .POST, url: base + "/api/v4/store/execute", headers: h,
                                                             body: JSON.serialize(.object(["statement": .string(statement), "args": .object(args)]))))
            guard r.status.code == 200 else { throw ValidationError("\(statement): HTTP \(r.status.code) \(String(decoding: r.body, as: UTF8.self))") }
        }
    }

    /// How many of `peers` ended with each close code, for a failure's message.
    static func closeCodes(_ peers: [BenchPeer]) -> String {
        Dictionary(grouping: peers) { $0.closedCode.load(ordering: .relaxed) }.map { "\($0.key): \($0.value.count)" }.sorted().joined(separator: ", ")
    }

    static func waitUntil(_ timeout: Duration, _ done: () -> Bool) async -> Bool {
        let end = ContinuousClock.now + timeout
        while !done() {
            if ContinuousClock.now > end { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }

    static func micros() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }

    /// One fresh peer subscribes to a whole collection; time until `synced`.
    struct Initial: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "initial", abstract: "Initial sync of a collection to one fresh peer.")
        @OptionGroup var target: Target
        @Option var collection = "bench"
        @Flag(help: "Also decode every state as a CRDT document and check its _id (a small peer's work before merging).")
        var decodeStates = false

        func run() async throws {
            let (syncURL, _) = try target.endpoint()
            let group = try EventLoopGroup(threads: max(1, target.threads))
            defer { group.shutdown() }
            let peer = BenchPeer(loop: group.next(), site: UInt64.random(in: 1...UInt64.max), credentials: .apiKey(target.key),
                                 subscription: Subscribe(id: 1, query: "SELECT * FROM \(collection)"), decodeStates: decodeStates)
            let start = ContinuousClock.now
            peer.connect(syncURL)
            guard await SyncBench.waitUntil(.seconds(600), { peer.synced.load(ordering: .relaxed) || peer.closedCode.load(ordering: .relaxed) >= 0 }),
                  peer.synced.load(ordering: .relaxed) else {
                throw ValidationError("the peer did not finish its initial sync (close code \(peer.closedCode.load(ordering: .relaxed)))")
            }
            let seconds = Double((ContinuousClock.now - start).components.attoseconds) / 1e18 + Double((ContinuousClock.now - start).components.seconds)
            let docs = peer.documents.load(ordering: .relaxed), bytes = peer.dataBytes.load(ordering: .relaxed)
            if peer.invalidStates.load(ordering: .relaxed) > 0 {
                throw ValidationError("\(peer.invalidStates.load(ordering: .relaxed)) states did not decode as CRDT documents with their entry's _id")
            }
            let checked = decodeStates ? "; states decoded as CRDT documents, \(peer.invalidStates.load(ordering: .relaxed)) invalid" : ""
            print("initial sync: \(docs) documents, \(bytes) bytes in \(String(format: "%.2f", seconds)) s = \(Int(Double(docs) / seconds)) docs/s, \(String(format: "%.1f", Double(bytes) / seconds / 1e6)) MB/s\(checked)")
            peer.close()
        }
    }

    /// N peers subscribed to one collection; REST writes; latency from before the write is sent
    /// to each peer's receipt of the change (one clock: writer and peers are this process).
    struct Fanout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "fanout", abstract: "Fan-out latency from a REST write to N subscribed peers.")
        @OptionGroup var target: Target
        @Option var peers = 1000
        @Option var writes = 50
        @Option var collection = "fanout"
        @Option(name: .customLong("write-url"), help: "Send the REST writes to this server instead (e.g. another local node: latency through the cloud).")
        var writeURL: String?
        @Option(name: .customLong("interval-ms"), help: "Pause between writes.") var intervalMillis = 100
        @Option(name: .customLong("rule-per-peer-secret-file"), help: "Log each peer in with its own HS256 JWT (this secret file, as the server's --jwt-secret-file) whose read rule differs from every other peer's and matches every write.")
        var rulePerPeerSecretFile: String?

        func run() async throws {
            let (syncURL, base) = try target.endpoint()
            let group = try EventLoopGroup(threads: max(1, target.threads))
            defer { group.shutdown() }
            let sent = Mutex<[Int: Int64]>([:])
            let latencies = Mutex<[Int64]>([])
            let onChanges: @Sendable (Int, [ChangeEntry]) -> Void = { _, entries in
                let now = SyncBench.micros()
                for e in entries {
                    guard case .string(let id) = e.document.id, let n = Int(id.dropFirst(2)),
                          let at = sent.withLock({ $0[n] }) else { continue }
                    latencies.withLock { $0.append(now - at) }
                }
            }
            let credentials = try peerCredentials()
            var all: [BenchPeer] = []
            for i in 0..<peers {
                let p = BenchPeer(loop: group.next(), site: UInt64(i + 1) << 20, credentials: credentials(i),
                                  subscription: Subscribe(id: 1, query: "SELECT * FROM \(collection)"), onChanges: onChanges)
                p.connect(syncURL)
                all.append(p)
                if i % 50 == 49 { try await Task.sleep(for: .milliseconds(20)) }  // do not overflow the listen backlog
            }
            guard await SyncBench.waitUntil(.seconds(120), { all.allSatisfy { $0.synced.load(ordering: .relaxed) } }) else {
                throw ValidationError("only \(all.filter { $0.synced.load(ordering: .relaxed) }.count) of \(peers) peers synced; "
                    + "the others by close code (-1: open, 0: no connection): \(SyncBench.closeCodes(all.filter { !$0.synced.load(ordering: .relaxed) }))")
            }
            let http = try HTTPClient()
            let writeBase = writeURL ?? base
            for w in 0..<writes {
                sent.withLock { $0[w] = SyncBench.micros() }
                try await target.execute(http, writeBase, "INSERT INTO \(collection) DOCUMENTS (:d)", ["d": ["_id": .string("w-\(w)"), "n": .int(Int64(w))]])
                try await Task.sleep(for: .milliseconds(intervalMillis))
            }
            _ = await SyncBench.waitUntil(.seconds(30)) { latencies.withLock { $0.count } >= peers * writes }
            var l = latencies.withLock { $0 }.sorted()
            guard !l.isEmpty else { throw ValidationError("no deliveries") }
            let pct = { (p: Double) -> String in String(format: "%.1f", Double(l[min(l.count - 1, Int(Double(l.count) * p))]) / 1000) }
            print("fan-out: \(peers) peers × \(writes) writes: \(l.count) deliveries (expected \(peers * writes)); latency ms p50 \(pct(0.5)) p90 \(pct(0.9)) p99 \(pct(0.99)) max \(pct(1))")
            l.removeAll()
            for p in all { p.close() }
            try await Task.sleep(for: .milliseconds(500))
        }

        /// The API key for every peer, or per peer a JWT whose rule `n >= 0 AND n != -(i + 1)`
        /// is its own (no two sessions share a condition) and true for every write.
        func peerCredentials() throws -> (Int) -> SyncCredentials {
            guard let rulePerPeerSecretFile else { return { _ in .apiKey(target.key) } }
            let options = try JWTOptions.parse(["--jwt-secret-file", rulePerPeerSecretFile])
            guard let signer = try options.verifier() else { throw ValidationError("no secret in \(rulePerPeerSecretFile)") }
            let now = JWTVerifier.wallClockSeconds()
            return { [collection] i in
                let rule: Value = .array([.string("n >= 0 AND n != -\(i + 1)")])
                let read: Value = .object(["everything": .bool(false), "queriesByCollection": .object([collection: rule])])
                return .jwt(signer.sign(claims: ["sub": .string("peer-\(i)"), "iat": .int(now), "exp": .int(now + 3600),
                                                 "permissions": .object(["read": read])]))
            }
        }
    }

    /// N idle peers with one subscription each; the server's RSS before and after, per peer.
    struct Idle: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "idle", abstract: "Server memory per idle connected peer.")
        @OptionGroup var target: Target
        @Option var peers = 1000
        @Option(name: .customLong("server-pid"), help: "PID of the server (its VmRSS is read from /proc).") var serverPID: Int32
        @Option var collection = "idle"

        func run() async throws {
            let (syncURL, _) = try target.endpoint()
            let group = try EventLoopGroup(threads: max(1, target.threads))
            defer { group.shutdown() }
            // Warm up the server's pools and caches with a few peers first, then measure the rest.
            var all: [BenchPeer] = []
            func open(_ n: Int) async throws {
                for _ in 0..<n {
                    let p = BenchPeer(loop: group.next(), site: UInt64.random(in: 1...UInt64.max), credentials: .apiKey(target.key),
                                      subscription: Subscribe(id: 1, query: "SELECT * FROM \(collection) WHERE owner = 'nobody'"))
                    p.connect(syncURL)
                    all.append(p)
                    if all.count % 50 == 0 { try await Task.sleep(for: .milliseconds(20)) }
                }
                guard await SyncBench.waitUntil(.seconds(120), { all.allSatisfy { $0.synced.load(ordering: .relaxed) } }) else {
                    throw ValidationError("peers did not all sync")
                }
            }
            try await open(20)
            try await Task.sleep(for: .seconds(1))
            let before = try rss()
            try await open(peers)
            try await Task.sleep(for: .seconds(2))
            let after = try rss()
            print("idle peers: \(peers); server RSS \(before / 1024) KiB → \(after / 1024) KiB = \((after - before) / peers) bytes per idle peer (WebSocket + session + kernel-independent user memory)")
            for p in all { p.close() }
            try await Task.sleep(for: .milliseconds(500))
        }

        func rss() throws -> Int {
            guard let f = fopen("/proc/\(serverPID)/status", "r") else { throw ValidationError("no process \(serverPID)") }
            defer { fclose(f) }
            var line = [CChar](repeating: 0, count: 256)
            while fgets(&line, 256, f) != nil {
                let s = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if s.hasPrefix("VmRSS:") {
                    return (Int(s.split(separator: " ").dropFirst().first { !$0.isEmpty }.map(String.init) ?? "") ?? 0) * 1024
                }
            }
            throw ValidationError("no VmRSS for \(serverPID)")
        }
    }

    /// Bytes on the wire for a one-field update of a large document, as a subscribed peer receives it.
    struct UpdateSize: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "update-size", abstract: "Wire size of a one-field update of a large document.")
        @OptionGroup var target: Target
        @Option(help: "Document size in KB.") var kilobytes = 250

        func run() async throws {
            let (syncURL, base) = try target.endpoint()
            let group = try EventLoopGroup(threads: 1)
            defer { group.shutdown() }
            let http = try HTTPClient()
            let collection = "big\(Int.random(in: 0..<1_000_000))"
            var fields: [String: Value] = ["_id": "big"]
            for i in 0..<(kilobytes * 4) { fields["f\(i)"] = .string(String(repeating: "x", count: 240)) }
            try await target.execute(http, base, "INSERT INTO \(collection) DOCUMENTS (:d)", ["d": .object(fields)])
            let sizes = Mutex<[Int]>([])
            let peer = BenchPeer(loop: group.next(), site: 77, credentials: .apiKey(target.key),
                                 subscription: Subscribe(id: 1, query: "SELECT * FROM \(collection)"),
                                 onChanges: { n, _ in sizes.withLock { $0.append(n) } })
            peer.connect(syncURL)
            guard await SyncBench.waitUntil(.seconds(60), { peer.synced.load(ordering: .relaxed) }) else { throw ValidationError("no initial sync") }
            let initial = peer.dataBytes.load(ordering: .relaxed)
            try await target.execute(http, base, "UPDATE \(collection) SET f7 = 'changed' WHERE _id = 'big'", [:])
            guard await SyncBench.waitUntil(.seconds(10), { !sizes.withLock { $0.isEmpty } }) else { throw ValidationError("no change arrived") }
            print("update size: \(kilobytes) KB document (initial sync \(initial) bytes); one-field update arrived as a \(sizes.withLock { $0[0] })-byte WebSocket payload (+2–4 bytes WebSocket header)")
            peer.close()
        }
    }
}
