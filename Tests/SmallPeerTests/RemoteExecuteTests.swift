// `POST /api/v4/sync/remote_execute` against a real server with SmallPeers connected over real
// WebSockets (PROTOCOL.md §4.15, docs/API.md "Remote execution"): a peer that allows remote
// queries answers from its own store, one that does not answers "not allowed", PEERS WHERE picks
// peers, a peer that never answers times out, an old peer is "unsupported", bad requests are 400.
import Auth
import BigPeerServer
import BigPeerTestSupport
import DQL
import Postgres
@testable import SmallPeer
import HTTP
import ServerTestSupport
import Sockets
import SyncProtocol
import Testing
import Values

@Suite("Remote execution on connected small peers", .serialized)
struct RemoteExecuteTests {
    static let allowing: [UInt8] = [0xA1], refusing: [UInt8] = [0xB2], silent: [UInt8] = [0xC3], old: [UInt8] = [0xD4]
    static let path = "/api/v4/sync/remote_execute"

    func connect(_ server: InProcessServer, key: String, _ peer: SmallPeer, peerKey: [UInt8], allow: Bool, name: String) throws -> SyncClient {
        var c = SyncClient.Configuration(url: "ws://127.0.0.1:\(server.port)", apiKey: key)
        c.peerKey = peerKey
        c.deviceName = name
        c.allowRemoteQueries = allow
        c.reconnectBase = .milliseconds(50)
        return try SyncClient(peer: peer, configuration: c)
    }

    /// A raw peer that announces `caps` and then answers nothing.
    func rawPeer(_ server: InProcessServer, key: String, peerKey: [UInt8], caps: [String]) async throws -> SyncTestClient {
        let c = try await SyncTestClient(port: server.port, loop: TestLoops.group.next())
        c.send(.hello(Hello(site: UInt64(peerKey[0]), peerKey: peerKey, deviceName: "raw", credentials: .apiKey(key),
                            credit: 1 << 20, maxMessageSize: 1 << 20, capabilities: caps)))
        _ = try await c.waitFor { if case .welcome = $0 { true } else { false } }
        return c
    }

    static func results(_ reply: RESTReply) -> [Value] {
        if case .array(let r)? = reply["result"] { r } else { [] }
    }

    @Test func remoteExecute_reachesTheMatchingPeers() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        try await InProcessServer.with({ $0.remoteQueryTimeout = .seconds(3) }) { server in
            let key = try await server.newKey()
            let a = try openPeer(dirA.path), b = try openPeer(dirB.path)
            _ = try a.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a1', 'n': 1}), ({'_id': 'a2', 'n': 2})")
            _ = try b.execute("INSERT INTO notes DOCUMENTS ({'_id': 'b1', 'n': 3})")
            try a.setPresenceMetadata(["role": "till"])
            let clientA = try connect(server, key: key, a, peerKey: Self.allowing, allow: true, name: "allowing")
            let clientB = try connect(server, key: key, b, peerKey: Self.refusing, allow: false, name: "refusing")
            try await afterwards({ await clientA.stop(); await clientB.stop() }) {
                #expect(await eventually { clientA.status.phase == .connected && clientB.status.phase == .connected }, "both peers connected")
                let rest = server.rest(key: key)
                let keyA = PresenceGraph.keyString(Self.allowing), keyB = PresenceGraph.keyString(Self.refusing)

                // Every connected peer: the allowing one answers from its own store, the other refuses.
                let all = try await rest.post(Self.path, ["statement": "SYNC CONTEXT (PEERS) SELECT * FROM notes ORDER BY _id"])
                #expect(all.status == 200, "\(all.text)")
                let both = Self.results(all)
                #expect(both.map { $0["peer"] } == [.string(keyA), .string(keyB)])
                #expect(both.first?["items"] == [["_id": "a1", "n": 1], ["_id": "a2", "n": 2]])
                #expect(both.first?["error"] == .null)
                #expect(both.first?["deviceName"] == "allowing")
                #expect(both.first?["totalWarningsCount"] == 0)
                #expect(both.last?["items"] == [])
                #expect(both.last?["error"]?["code"] == "not_allowed")
                #expect(both.last?["error"]?["description"] == "remote queries are not allowed by this peer")

                // PEERS WHERE with an argument: only the matching peer, with the query's arguments too.
                let one = try await rest.post(Self.path, ["statement": "SYNC CONTEXT (PEERS WHERE peerKey = :pk) SELECT _id FROM notes WHERE n >= :min",
                                                          "args": ["pk": .string(keyA), "min": 2]])
                #expect(Self.results(one).map { $0["peer"] } == [.string(keyA)])
                #expect(Self.results(one).first?["items"] == [["_id": "a2"]])
                let byName = try await rest.post(Self.path, ["statement": "SYNC CONTEXT (PEERS WHERE deviceName = 'refusing') SELECT * FROM notes"])
                #expect(Self.results(byName).map { $0["peer"] } == [.string(keyB)])

                // The condition sees the peers' presence records (metadata, os) once they have arrived.
                let byMetadata: Value = ["statement": "SYNC CONTEXT (PEERS WHERE peerMetadata.role = 'till' AND os != '') SELECT _id FROM notes WHERE n = 1"]
                #expect(try await eventually { Self.results(try await rest.post(Self.path, byMetadata)).map { $0["peer"] } == [.string(keyA)] },
                        "PEERS WHERE on presence metadata picks the allowing peer")

                // No peer matches: an empty result.
                let none = try await rest.post(Self.path, ["statement": "SYNC CONTEXT (PEERS WHERE peerKey = 'pknobody') SELECT * FROM notes"])
                #expect(none.status == 200 && none["result"] == [])

                // A peer that never answers times out; one that predates remote queries is unsupported.
                let silent = try await rawPeer(server, key: key, peerKey: Self.silent, caps: [SyncCapability.remoteQuery])
                let old = try await rawPeer(server, key: key, peerKey: Self.old, caps: [])
                defer { silent.close(); old.close() }
                let keyS = PresenceGraph.keyString(Self.silent), keyO = PresenceGraph.keyString(Self.old)
                let waited = try await rest.post(Self.path, ["statement": "SYNC CONTEXT (PEERS WHERE peerKey IN (:s, :o)) SELECT * FROM notes",
                                                             "args": ["s": .string(keyS), "o": .string(keyO)]])
                let codes = Dictionary(uniqueKeysWithValues: Self.results(waited).map { ($0["peer"] ?? .null, $0["error"]?["code"] ?? .null) })
                #expect(codes == [.string(keyS): "timeout", .string(keyO): "unsupported"])
                let asked = try await silent.waitFor { if case .query = $0 { true } else { false } }
                guard case .query(let q)? = asked.last else { Issue.record("no query reached the silent peer"); return }
                #expect(q.statement == "SELECT * FROM notes" && q.timeoutMillis == 3000)
            }
        }
    }

    @Test func badRequests_areRefused() async throws {
        try await InProcessServer.with { server in
            let key = try await server.newKey()
            let rest = server.rest(key: key)
            for body: Value in [
                "not an object",
                ["args": [:]],
                ["statement": "SELECT * FROM notes"],
                ["statement": "SYNC CONTEXT (PEERS) DELETE FROM notes"],
                ["statement": "SYNC CONTEXT (PEERS WHERE) SELECT * FROM notes"],
                ["statement": "SYNC CONTEXT (PEERS WHERE nosuchfunction(peerKey)) SELECT * FROM notes"],
                ["statement": "SYNC CONTEXT (PEERS WHERE peerKey = :missing) SELECT * FROM notes"],
                ["statement": "SYNC CONTEXT (PEERS) SELECT * FROM notes", "args": [1]],
            ] {
                let r = try await rest.post(Self.path, body)
                #expect(r.status == 400, "\(body): \(r.text)")
                #expect(r["error"]?["description"] != nil, "\(body): \(r.text)")
            }
            let garbage = try await rest.post(Self.path, raw: Array("{not json".utf8), headers: ["Content-Type": "application/json"])
            #expect(garbage.status == 400)

            // Remote queries read every peer's store: a key limited to some collections may not.
            let limited = try await server.newKey(read: .only(["notes"]), write: .none)
            let refused = try await server.rest(key: limited).post(Self.path, ["statement": "SYNC CONTEXT (PEERS) SELECT * FROM notes"])
            #expect(refused.status == 403)
            let anonymous = try await server.rest().post(Self.path, ["statement": "SYNC CONTEXT (PEERS) SELECT * FROM notes"])
            #expect(anonymous.status == 401)
        }
    }

    /// The caller's read rules (docs/AUTH.md, "Rules") go with the SELECT to every peer.
    @Test func remoteExecute_carriesTheCallersReadRules() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await InProcessServer.with({ $0.remoteQueryTimeout = .seconds(3) }) { server in
            let key = try await server.newKey()
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let limited = try await server.keys.create(description: "n >= 2", expiresAt: expires, read: .all, write: .none,
                                                       readRules: [try DocumentRule.parse(entry: "notes: n >= 2")]).1.text
            let a = try openPeer(dir.path)
            _ = try a.execute("INSERT INTO notes DOCUMENTS ({'_id': 'a1', 'n': 1}), ({'_id': 'a2', 'n': 2})")
            let client = try connect(server, key: key, a, peerKey: Self.allowing, allow: true, name: "allowing")
            try await afterwards({ await client.stop() }) {
                #expect(await eventually { client.status.phase == .connected })
                let statement: Value = ["statement": "SYNC CONTEXT (PEERS) SELECT * FROM notes ORDER BY _id"]
                let whole = try await server.rest(key: key).post(Self.path, statement)
                #expect(Self.results(whole).first?["items"] == [["_id": "a1", "n": 1], ["_id": "a2", "n": 2]])
                let ruled = try await server.rest(key: limited).post(Self.path, statement)
                #expect(Self.results(ruled).first?["items"] == [["_id": "a2", "n": 2]], "\(ruled.text)")
            }
        }
    }
}
