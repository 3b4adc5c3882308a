import Auth
import Glibc
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import CRDT
import HTTP
import Postgres
import Sockets
import Store
import SyncProtocol
import Testing
import Values
import WebSocket

/// `GET /api/v4/sync` through a real server, real WebSockets and a real PostgreSQL: the handshake
/// and its refusals, credentials (API keys with scopes, HS256 JWTs), the transport rules, and
/// fan-out across two instances on one database.
@Suite struct SyncEndpointTests {
    static let loops = try! EventLoopGroup(threads: 1)
    static let jwtSecret = Array("a test secret that is long enough for HS256!".utf8)

    /// A server on its own database with auth on, an API key with `read`/`write` scopes, and a client HTTP pool.
    static func withServer(read: String = "--read-all", write: String = "--write-all", instances: Int = 1,
                           _ body: ([BigPeerService], String, HTTPClient) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            let servers = MutexBox<[InProcessServer]>([])
            try await afterwards({ for s in servers.withLock({ $0 }) { await s.stop() } }) {
                for _ in 0..<instances {
                    let server = try await InProcessServer.start(on: db) { $0.jwt = try JWTVerifier(secret: jwtSecret) }
                    servers.withLock { $0.append(server) }
                }
                let scopes = { (flag: String) -> CollectionScope in
                    flag.hasSuffix("-all") ? .all : .only(Set(flag.split(separator: "=").last.map { $0.split(separator: ",").map(String.init) } ?? []))
                }
                let started = servers.withLock { $0 }
                let key = try await started[0].newKey(read: scopes(read), write: scopes(write))
                try await body(started.map(\.service), key, started[0].http)
            }
        }
    }

    static func hello(site: UInt64, _ credentials: SyncCredentials?) -> SyncMessage {
        .hello(Hello(site: site, peerKey: [7, 7], deviceName: "test-\(site)", credentials: credentials, credit: 1 << 20, maxMessageSize: 1 << 20))
    }

    @discardableResult
    static func execute(_ client: HTTPClient, _ port: Int, key: String, _ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        try await RESTClient(http: client, port: port, key: key).executeOK(statement, args)
    }

    /// Connects and completes the handshake with an API key or JWT.
    static func connect(_ port: Int, site: UInt64, _ credentials: SyncCredentials) async throws -> SyncTestClient {
        let c = try await SyncTestClient(port: port, loop: loops.next())
        c.send(hello(site: site, credentials))
        let m = try await c.nextMessage()
        guard case .welcome = m else { throw SyncTestClientError("expected welcome, got \(m)") }
        return c
    }

    @Test func apiKey_subscribeReceiveUploadAck_andRESTSeesTheUpload() async throws {
        try await Self.withServer { services, key, http in
            let port = services[0].port
            _ = try await Self.execute(http, port, key: key, "INSERT INTO cars DOCUMENTS (:a), (:b)",
                                       ["a": ["_id": "a", "color": "red"], "b": ["_id": "b", "color": "blue"]])
            let peer = try await Self.connect(port, site: 0xA1, .apiKey(key))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"])))
            let initial = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            let ids = initial.flatMap { m -> [Value] in if case .documents(_, let e) = m { e.map(\.document.id) } else { [] } }
            #expect(ids == ["a"])

            // Upload a new red car made on the peer's own replica.
            var replica = Replica(site: SiteID(0xA1))
            var doc = try Document(id: "c")
            let before = doc.versionVector
            _ = try doc.upsert(["_id": "c", "color": "red", "seats": 4], replica: &replica)
            peer.send(.upload(seq: 1, entries: [UploadEntry(document: DocumentRef(collection: "cars", id: "c"), delta: doc.delta(since: before).encode())]))
            let acked = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            guard case .ack(1, let txn, let rejected)? = acked.last else { Issue.record("no ack: \(acked)"); return }
            #expect(rejected.isEmpty)
            #expect(txn > 0)
            let rest = try await Self.execute(http, port, key: key, "SELECT * FROM cars WHERE _id = 'c'")
            #expect(rest["items"] == [["_id": "c", "color": "red", "seats": 4]])

            // A REST write reaches the subscribed peer live.
            _ = try await Self.execute(http, port, key: key, "UPDATE cars SET seats = 5 WHERE _id = 'a'")
            let live = try await peer.waitFor { m in
                if case .changes(_, let e) = m { e.contains { $0.document.id == "a" } } else { false }
            }
            #expect(!live.isEmpty)
            // The document the peer created is not sent back to it (it holds all of it).
            let echoed = (acked + live).contains { m in
                if case .changes(_, let e) = m { e.contains { $0.document.id == "c" } } else { false }
            }
            #expect(!echoed, "the peer's own new document came back: \(acked + live)")
            peer.send(.bye(code: 1000, reason: "done"))
            #expect(await peer.closeCode() == 1000)
        }
    }

    @Test func refusals_badKeyNoCredentialsUnknownVersion_closeWithTheDocumentedCodes() async throws {
        try await Self.withServer { services, key, _ in
            let port = services[0].port
            let wrongSecret = String(key.dropLast(4)) + "0000"
            let cases: [(SyncMessage, UInt16)] = [
                (Self.hello(site: 1, .apiKey(wrongSecret)), 4001),
                (Self.hello(site: 2, .apiKey("not-a-key")), 4001),
                (Self.hello(site: 3, nil), 4001),
                (Self.hello(site: 4, .jwt("a.b.c")), 4001),
                (.hello(Hello(version: 99, site: 5, peerKey: [1], deviceName: "x", credentials: .apiKey(key), credit: 1 << 20, maxMessageSize: 1 << 20)), 4002),
            ]
            for (hello, code) in cases {
                let c = try await SyncTestClient(port: port, loop: Self.loops.next())
                c.send(hello)
                let m = try await c.nextMessage()
                guard case .refuse(let refused, let reason) = m else { Issue.record("expected refuse, got \(m)"); continue }
                #expect(refused == code, "\(reason)")
                #expect(!reason.isEmpty)
                #expect(await c.closeCode() == code)
            }
        }
    }

    @Test func transportRules_textIs4004_garbageIs4004_noSubprotocolIs400() async throws {
        try await Self.withServer { services, key, http in
            let port = services[0].port
            let text = try await Self.connect(port, site: 10, .apiKey(key))
            text.sendRaw(.text("{\"t\":\"ping\"}"))
            #expect(await text.closeCode() == 4004)

            let garbage = try await Self.connect(port, site: 11, .apiKey(key))
            garbage.sendRaw(.binary([0xA1, 0x61, 0x74, 0xFF, 0x00]))
            #expect(await garbage.closeCode() == 4004)

            let before = try await SyncTestClient(port: port, loop: Self.loops.next())
            before.sendRaw(.binary([0x01, 0x02, 0x03]))  // not even a hello
            #expect(await before.closeCode() == 4004)

            var h = HTTPHeaders()
            for (n, v) in [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", "13")] { h.add(n, v) }
            let r = try await http.execute(HTTPClientRequest(method: .GET, url: "http://127.0.0.1:\(port)/api/v4/sync", headers: h))
            #expect(r.status.code == 400)
        }
    }

    /// Scopes: a key that may read only `cars` and write only `notes`.
    @Test func apiKeyScopes_limitSubscriptionsAndUploads() async throws {
        try await Self.withServer(read: "--read=cars", write: "--write=notes") { services, key, _ in
            let peer = try await Self.connect(services[0].port, site: 0xB2, .apiKey(key))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM trucks")))
            let refused = try await peer.waitFor { if case .subscriptionError = $0 { true } else { false } }
            guard case .subscriptionError(1, let why)? = refused.last else { Issue.record("\(refused)"); return }
            #expect(why.contains("trucks"))
            peer.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced(2, _) = $0 { true } else { false } }

            var replica = Replica(site: SiteID(0xB2))
            var entries: [UploadEntry] = []
            for (collection, id) in [("cars", "x"), ("notes", "n1"), ("trucks", "t")] {
                var doc = try Document(id: .string(id))
                let before = doc.versionVector
                _ = try doc.upsert(["_id": .string(id), "v": 1], replica: &replica)
                entries.append(UploadEntry(document: DocumentRef(collection: collection, id: .string(id)), delta: doc.delta(since: before).encode()))
            }
            peer.send(.upload(seq: 1, entries: entries))
            let acks = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            guard case .ack(1, _, let rejected)? = acks.last else { Issue.record("\(acks)"); return }
            #expect(rejected.map(\.index) == [0, 2])
            #expect(rejected.allSatisfy { $0.message.contains("not permitted to write") })
            let stored = try await services[0].store.fetchDocuments([("notes", "n1"), ("cars", "x"), ("trucks", "t")])
            #expect(stored.map(\.collection) == ["notes"])
        }
    }

    @Test func jwt_validTokenGrantsItsClaims_expiredAndForgedAreRefused() async throws {
        try await Self.withServer { services, key, http in
            let port = services[0].port
            let verifier = try JWTVerifier(secret: Self.jwtSecret)
            let now = JWTVerifier.wallClockSeconds()
            let token = verifier.sign(claims: ["sub": "tablet-7", "exp": .int(now + 600), "read": ["cars"], "write": "*"])
            _ = try await Self.execute(http, port, key: key, "INSERT INTO cars DOCUMENTS ({_id: 'j', n: 1})")
            let peer = try await Self.connect(port, site: 0xC3, .jwt(token))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            let got = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            #expect(got.contains { if case .documents(1, let e) = $0 { e.map(\.document.id) == ["j"] } else { false } })
            peer.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM secrets")))
            _ = try await peer.waitFor { if case .subscriptionError(2, _) = $0 { true } else { false } }

            let expired = verifier.sign(claims: ["exp": .int(now - 3600), "read": "*"])
            let forged = try JWTVerifier(secret: Array("another secret of at least thirty-two bytes".utf8))
                .sign(claims: ["exp": .int(now + 600), "read": "*", "write": "*"])
            for bad in [expired, forged] {
                let c = try await SyncTestClient(port: port, loop: Self.loops.next())
                c.send(Self.hello(site: 0xC4, .jwt(bad)))
                guard case .refuse(4001, _) = try await c.nextMessage() else { Issue.record("accepted \(bad)"); continue }
            }
        }
    }

    /// Two instances on one database: a peer on instance B receives a REST write made on instance A.
    @Test func twoInstances_aWriteOnOneReachesAPeerOnTheOther() async throws {
        try await Self.withServer(instances: 2) { services, key, http in
            let peer = try await Self.connect(services[1].port, site: 0xD4, .apiKey(key))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            _ = try await Self.execute(http, services[0].port, key: key, "INSERT INTO cars DOCUMENTS ({_id: 'far', n: 1})")
            let live = try await peer.waitFor { m in
                if case .changes(_, let e) = m { e.contains { $0.document.id == "far" } } else { false }
            }
            #expect(!live.isEmpty)
        }
    }

    /// Shutdown closes sync sockets with 1001 (going away), so peers reconnect elsewhere.
    @Test func shutdown_closesPeersWithGoingAway() async throws {
        try await TestPostgres.withDatabase { db in
            var config = InProcessServer.configuration(db)
            config.insecureDevelopment = true
            let service = try await BigPeerService.start(config)
            let peer = try await Self.connect(service.port, site: 0xE5, .apiKey("anything: insecure-dev accepts every peer"))
            await service.stop()
            #expect(await peer.closeCode() == 1001)
        }
    }

    /// A peer that grants a huge credit, subscribes to ~10 MB of documents and then never reads:
    /// the server's queue for it stays capped (`maxQueuedBytes`) and the peer is dropped, while
    /// other peers keep being served.
    @Test func aPeerThatStopsReading_isDropped_andOthersAreServed() async throws {
        try await InProcessServer.with({ config in
            config.insecureDevelopment = true
            config.maxBodyBytes = 64 << 20
            config.syncWebSocket = WebSocketConfiguration(maxFrameSize: 16 << 20, maxMessageSize: 16 << 20, highWaterMark: 1 << 20,
                                                          lowWaterMark: 256 << 10, maxQueuedBytes: 2 << 20, writeStallTimeout: .seconds(2))
        }) { server in
            let (service, http) = (server.service, server.http)
            try await SyncSessionBoundsTests.insert(160, into: "big", blob: String(repeating: "y", count: 64 << 10), http, service.port)

            let fd = try await RawSocket.stuckSyncPeer(port: service.port, maxMessageSize: 16 << 20, subscribingTo: ["SELECT * FROM big"])
            defer { close(fd) }
            #expect(await eventually { service.syncConnections == 0 }, "the stuck peer was not dropped")
            // It had been accepted (the drop is the stall, not a refusal): its first frame is `welcome`.
            let first = try await RawSocket.readFrame(fd)
            guard case .welcome? = try? SyncMessageDecoder.decode(first) else { Issue.record("first frame was not welcome"); return }

            // Another peer is served normally afterwards.
            let ok = try await Self.connect(service.port, site: 100, .apiKey("insecure-dev"))
            ok.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM big WHERE _id = 'doc-0-0'")))
            let got = try await ok.waitFor { if case .synced = $0 { true } else { false } }
            #expect(got.contains { if case .documents(1, let e) = $0 { e.count == 1 } else { false } })
        }
    }
}
