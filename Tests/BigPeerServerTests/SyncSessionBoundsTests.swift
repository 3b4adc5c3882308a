import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Glibc
import HTTP
import Postgres
import Sockets
import SyncProtocol
import Testing
import Values
import WebSocket

/// Issue #16 items 5, 6 and 9 through a real server, real WebSockets and a real PostgreSQL: the
/// session cap (4003), a bounded queue for a peer that grants huge credit and never reads, no
/// permessage-deflate on sync, and credentials re-checked during a session (revoked API key,
/// expired JWT, `auth` refreshing and narrowing them).
@Suite struct SyncSessionBoundsTests {
    static let loops = SyncEndpointTests.loops
    static let secret = SyncEndpointTests.jwtSecret

    static func insecureServer(_ db: TestDatabase, _ adjust: (inout ServerConfiguration) -> Void = { _ in }) async throws -> BigPeerService {
        var config = InProcessServer.configuration(db)
        config.insecureDevelopment = true
        adjust(&config)
        return try await BigPeerService.start(config)
    }

    // MARK: - Item 5: the session cap

    @Test func sessionCap_refusesThePeerBeyondItWith4003_andAClosedSessionFreesItsSlot() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await Self.insecureServer(db) { $0.maxSyncSessions = 2 }
            defer { Task { await service.stop() } }
            let first = try await SyncEndpointTests.connect(service.port, site: 1, .apiKey("dev"))
            _ = try await SyncEndpointTests.connect(service.port, site: 2, .apiKey("dev"))
            #expect(service.syncSessionCount == 2)

            let third = try await SyncTestClient(port: service.port, loop: Self.loops.next())
            third.send(SyncEndpointTests.hello(site: 3, .apiKey("dev")))
            let answer = try await third.nextMessage()
            guard case .refuse(let code, let reason) = answer else { Issue.record("expected refuse, got \(answer)"); return }
            #expect(code == 4003)
            #expect(reason.contains("too many sync sessions"), "\(reason)")
            #expect(await third.closeCode() == 4003)

            first.send(.bye(code: 1000, reason: ""))
            #expect(await first.closeCode() == 1000)
            #expect(await eventually { service.syncSessionCount == 1 })
            _ = try await SyncEndpointTests.connect(service.port, site: 4, .apiKey("dev"))
            #expect(service.syncSessionCount == 2)
        }
    }

    /// `--max-sync-sessions-per-key`: one key (leaked, or a runaway client) cannot take every
    /// slot: its third session gets 4003 while another key's is admitted, and a freed slot of
    /// the first key is its again.
    @Test func perKeyCap_refusesTheKeysSessionBeyondIt_whileAnotherKeyIsAdmitted() async throws {
        try await InProcessServer.with({ $0.maxSyncSessionsPerKey = 2 }) { server in
            let (one, other) = (try await server.newKey(), try await server.newKey())
            let first = try await SyncEndpointTests.connect(server.port, site: 1, .apiKey(one))
            _ = try await SyncEndpointTests.connect(server.port, site: 2, .apiKey(one))
            let third = try await SyncTestClient(port: server.port, loop: Self.loops.next())
            third.send(SyncEndpointTests.hello(site: 3, .apiKey(one)))
            let answer = try await third.nextMessage()
            guard case .refuse(let code, let reason) = answer else { Issue.record("expected refuse, got \(answer)"); return }
            #expect(code == 4003 && reason.contains("too many sync sessions for these credentials (at most 2)"), "\(reason)")
            _ = try await SyncEndpointTests.connect(server.port, site: 4, .apiKey(other))
            first.send(.bye(code: 1000, reason: ""))
            #expect(await first.closeCode() == 1000)
            #expect(await eventually { server.service.syncSessionCount == 2 })
            _ = try await SyncEndpointTests.connect(server.port, site: 5, .apiKey(one))
        }
    }

    // MARK: - Item 5: a peer that never reads

    /// The peer grants 1 GiB of credit, subscribes to ~8 MB of documents, ~8 MB more are written
    /// live, and it reads nothing (4 KB receive buffer): the session stops producing at its queue
    /// limit (~1 MiB) instead of queueing everything the credit allows. Then the peer reads, and
    /// everything arrives: the session went on as the queue drained.
    @Test func aPeerWithHugeCreditThatNeverReads_holdsABoundedQueue_andGetsEverythingOnceItReads() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await Self.insecureServer(db) { $0.maxBodyBytes = 64 << 20 }
            defer { Task { await service.stop() } }
            let http = try HTTPClient()
            let documents = 128, blob = String(repeating: "y", count: 64 << 10)
            try await Self.insert(documents, into: "big", blob: blob, http, service.port)

            let fd = try await RawSocket.stuckSyncPeer(port: service.port, maxMessageSize: 1 << 20, subscribingTo: ["SELECT * FROM big", "SELECT * FROM live"])
            defer { close(fd) }
            // The session fills its queue and stops.
            #expect(await eventually { (service.syncQueueStatistics.first?.queued ?? 0) >= 1 << 20 })
            try await Self.insert(documents, into: "live", blob: blob, http, service.port)
            try await Task.sleep(for: .milliseconds(500))  // room for the session to (wrongly) go on

            let limit = 1 << 20
            let stats = service.syncQueueStatistics
            #expect(stats.count == 1)
            let peak = stats.first?.peak ?? 0
            // The limit plus what one step may add past it: one entry (~64 KiB) and control messages.
            #expect(peak >= 1 << 20 && peak <= limit + (256 << 10), "peak queued bytes \(peak), limit \(limit)")

            // Reading now: every document of both subscriptions arrives.
            var big = Set<Value>(), live = Set<Value>(), synced = false
            let end = ContinuousClock.now + .seconds(60)
            while !(synced && big.count == documents && live.count == documents), ContinuousClock.now < end {
                guard let payload = try await Self.readDataFrame(fd) else { continue }
                switch try SyncMessageDecoder.decode(payload) {
                case .documents(1, let entries): big.formUnion(entries.map(\.document.id))
                case .synced(1, _): synced = true
                case .changes(_, let entries), .documents(2, let entries):
                    live.formUnion(entries.filter { $0.document.collection == "live" }.map(\.document.id))
                default: break
                }
            }
            #expect(synced && big.count == documents && live.count == documents, "big \(big.count), live \(live.count), synced \(synced)")
            #expect((service.syncQueueStatistics.first?.peak ?? 0) <= limit + (256 << 10))
        }
    }

    static func insert(_ count: Int, into collection: String, blob: String, _ http: HTTPClient, _ port: Int) async throws {
        for batch in 0..<(count / 32) {
            var args: [String: Value] = [:]
            for i in 0..<32 { args["d\(i)"] = ["_id": .string("doc-\(batch)-\(i)"), "blob": .string(blob)] }
            let list = (0..<32).map { "(:d\($0))" }.joined(separator: ", ")
            _ = try await SyncEndpointTests.execute(http, port, key: "unused", "INSERT INTO \(collection) DOCUMENTS \(list)", args)
        }
    }

    /// The payload of the next binary frame; nil for a control frame (a keep-alive Ping).
    static func readDataFrame(_ fd: Int32) async throws -> [UInt8]? {
        let (opcode, payload) = try await RawSocket.readFrameWithOpcode(fd, timeout: .seconds(10))
        return opcode == 2 ? payload : nil
    }

    // MARK: - Before hello

    /// Until its hello, a WebSocket peer is anyone who reached the port (the upgrade carries no
    /// credentials): its first message may be at most `SyncLimits.maxHelloBytes` (64 KiB), refused
    /// with 1009 from the frame's header, before the server reads or holds its payload. Before, it
    /// could make the server assemble 16 MiB (×12,500 sockets). After the hello the usual limit.
    @Test func aFirstMessagePastTheHelloLimit_isRefusedAtItsHeader() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await Self.insecureServer(db)
            defer { Task { await service.stop() } }
            let fd = try RawSocket.connect(port: service.port, receiveBuffer: 1 << 16)
            defer { close(fd) }
            try await RawSocket.upgrade(fd, port: service.port)
            // A masked binary frame declaring 1 MiB; only its header and 3 bytes are sent.
            try await RawSocket.write(fd, RawSocket.binaryFrameHeader(length: 1 << 20) + [0, 0, 0])
            let refusal = try await RawSocket.closePayload(fd)
            #expect(refusal.prefix(2) == [0x03, 0xF1], "close code 1009: \(refusal)")

            // After a hello, a message far above 64 KiB is not refused for its size (this one is
            // not a sync message at all: refused for that).
            let peer = try await RawSocket.stuckSyncPeer(port: service.port, maxMessageSize: 1 << 20, subscribingTo: [])
            defer { close(peer) }
            try await RawSocket.sendFrame(peer, [UInt8](repeating: 0xFF, count: 200 << 10))
            let end = try await RawSocket.closePayload(peer)
            #expect(end.prefix(2) != [0x03, 0xF1], "not 1009 once the hello is in")
        }
    }

    /// All sync WebSockets together may be receiving at most `maxBufferedRequestBytes` at once
    /// (here 200 KiB): a peer that has said hello may send large messages, but 10,000 of them may
    /// not each hold 16 MiB half-sent. Payload past it fails its connection with 1013.
    @Test func incomingMessagesOfAllPeers_shareOneBudget() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await Self.insecureServer(db) { $0.maxBufferedRequestBytes = 200 << 10 }
            defer { Task { await service.stop() } }
            let holder = try await RawSocket.stuckSyncPeer(port: service.port, site: 501, maxMessageSize: 1 << 20, subscribingTo: [])
            defer { close(holder) }
            try await RawSocket.write(holder, RawSocket.binaryFrameHeader(length: 150 << 10) + [UInt8](repeating: 0, count: (150 << 10) - 1))  // one byte short
            #expect(await eventually { service.syncIncomingMessageBytes == (150 << 10) - 1 })
            let other = try await RawSocket.stuckSyncPeer(port: service.port, site: 502, maxMessageSize: 1 << 20, subscribingTo: [])
            defer { close(other) }
            try await RawSocket.write(other, RawSocket.binaryFrameHeader(length: 100 << 10) + [UInt8](repeating: 0, count: 100 << 10))
            let refusal = try await RawSocket.closePayload(other)
            #expect(refusal.prefix(2) == [0x03, 0xF5], "close code 1013: \(refusal)")
        }
    }

    // MARK: - Item 6: no permessage-deflate on sync

    @Test func permessageDeflate_isNotNegotiatedOnSync_butStaysOnTheEchoEndpoint() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await Self.insecureServer(db) { $0.enableEcho = true }
            defer { Task { await service.stop() } }
            let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
            let sync = try await Self.upgradeHead(service.port, path: "/api/v4/sync", extra: "Sec-WebSocket-Protocol: bigpeer-sync.v1\r\n" + offer)
            #expect(sync.hasPrefix("HTTP/1.1 101"), "\(sync)")
            #expect(!sync.lowercased().contains("sec-websocket-extensions"), "sync negotiated an extension: \(sync)")
            let echo = try await Self.upgradeHead(service.port, path: "/api/v4/_echo", extra: offer)
            #expect(echo.hasPrefix("HTTP/1.1 101"), "\(echo)")
            #expect(echo.lowercased().contains("sec-websocket-extensions: permessage-deflate"), "echo lost deflate: \(echo)")
        }
    }

    /// The response head of an upgrade request to `path`.
    static func upgradeHead(_ port: Int, path: String, extra: String) async throws -> String {
        let fd = try RawSocket.connect(port: port, receiveBuffer: 1 << 16)
        defer { close(fd) }
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" + extra + "\r\n"
        try await RawSocket.write(fd, Array(request.utf8))
        var head: [UInt8] = []
        while !head.ends(with: [13, 10, 13, 10]) {
            switch try await DescriptorWait.receive(fd, upTo: 1, timeout: .seconds(5)) {
            case .data(let byte): head += byte
            case .closed, .timedOut: return String(decoding: head, as: UTF8.self)
            }
        }
        return String(decoding: head, as: UTF8.self)
    }

    // MARK: - Item 9: credentials during a session

    static func token(ttl: Int64, read: [String]? = nil, leeway: Int64 = 0) throws -> String {
        var verifier = try JWTVerifier(secret: secret)
        verifier.leewaySeconds = leeway
        let readClaim: Value = read.map { .array($0.map(Value.string)) } ?? "*"
        return verifier.sign(claims: ["sub": "device-1", "exp": .int(JWTVerifier.wallClockSeconds() + ttl), "read": readClaim, "write": "*"])
    }

    /// A server with auth on, JWTs verified without leeway (so `exp` is the end), and an API key.
    static func withAuthServer(_ body: (BigPeerService, String, HTTPClient) async throws -> Void) async throws {
        try await InProcessServer.with({ config in
            var verifier = try JWTVerifier(secret: secret)
            verifier.leewaySeconds = 0
            config.jwt = verifier
        }) { server in
            try await body(server.service, try await server.newKey(), server.http)
        }
    }

    @Test func aRevokedAPIKey_endsItsSessionWith4001_withinTheCachePeriod() async throws {
        try await Self.withAuthServer { service, key, http in
            let peer = try await SyncEndpointTests.connect(service.port, site: 0xB1, .apiKey(key))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            guard let id = APIKeyToken(parsing: key)?.id else { Issue.record("unparsable key"); return }
            #expect(try await APIKeyStore(pool: service.pool).revoke(id: id))
            // REST stops within the 5 s cache period; so does the session (re-checked every second).
            // The wait allows for a loaded machine; a session that outlives revocation still fails it.
            let end = ContinuousClock.now + .seconds(60)
            var closed: (UInt16, String)?
            while closed == nil, ContinuousClock.now < end {
                switch await peer.next(timeout: .seconds(1)) {
                case .closed(let code, let reason)?: closed = (code, reason)
                default: continue
                }
            }
            #expect(closed?.0 == 4001, "\(String(describing: closed))")
            #expect(closed?.1.contains("revoked") == true, "\(String(describing: closed))")
            _ = http
        }
    }

    @Test func anExpiringJWT_endsTheSessionWith4001_atExp() async throws {
        try await Self.withAuthServer { service, _, _ in
            // 8 s: the handshake and a ping must fit before exp on a loaded machine (2 s did not always).
            let peer = try await SyncEndpointTests.connect(service.port, site: 0xB2, .jwt(try Self.token(ttl: 8)))
            peer.send(.ping(1))
            _ = try await peer.waitFor { $0 == .pong(1) }  // alive before exp
            var closed: (UInt16, String)?
            let end = ContinuousClock.now + .seconds(60)
            while closed == nil, ContinuousClock.now < end {
                if case .closed(let code, let reason)? = await peer.next(timeout: .seconds(1)) { closed = (code, reason) }
            }
            #expect(closed?.0 == 4001, "\(String(describing: closed))")
            #expect(closed?.1 == "credentials expired", "\(String(describing: closed))")
        }
    }

    @Test func auth_withAFreshToken_extendsTheSession_andABadOneEndsIt() async throws {
        try await Self.withAuthServer { service, key, http in
            // Long enough for the handshake, a sync and the refresh on a loaded machine (2 s was not).
            let peer = try await SyncEndpointTests.connect(service.port, site: 0xB3, .jwt(try Self.token(ttl: 20)))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced = $0 { true } else { false } }
            peer.send(.refreshAuth(.jwt(try Self.token(ttl: 3600))))
            _ = try await peer.waitFor { if case .authRefreshed = $0 { true } else { false } }
            // Past the first token's exp the session still runs and delivers.
            try await Task.sleep(for: .seconds(22))
            _ = try await SyncEndpointTests.execute(http, service.port, key: key, "INSERT INTO cars DOCUMENTS ({'_id': 'after-exp'})")
            _ = try await peer.waitFor { m in
                if case .changes(_, let e) = m { e.contains { $0.document.id == "after-exp" } } else { false }
            }
            // A token that does not verify is refused, and the session ends.
            peer.send(.refreshAuth(.jwt("not.a.token")))
            #expect(await peer.closeCode() == 4001)
        }
    }

    @Test func auth_withANarrowerScope_endsTheDroppedSubscription_andStopsItsDelivery() async throws {
        try await Self.withAuthServer { service, key, http in
            let peer = try await SyncEndpointTests.connect(service.port, site: 0xB4, .jwt(try Self.token(ttl: 3600, read: ["a", "b"])))
            peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM a")))
            peer.send(.subscribe(Subscribe(id: 2, query: "SELECT * FROM b")))
            _ = try await SyncEndpointTests.execute(http, service.port, key: key, "INSERT INTO b DOCUMENTS ({'_id': 'b-held'})")
            var seen: [SyncMessage] = []
            var synced = Set<UInt32>()
            while synced.count < 2 || !Self.delivers(seen, "b-held") {
                let m = try await peer.nextMessage()
                seen.append(m)
                if case .synced(let id, _) = m { synced.insert(id) }
            }
            peer.send(.refreshAuth(.jwt(try Self.token(ttl: 3600, read: ["a"]))))
            let answer = try await peer.waitFor { if case .authRefreshed = $0 { true } else { false } }
            #expect(answer.contains { if case .subscriptionError(2, let msg) = $0 { msg.contains("not permitted to read collection b") } else { false } },
                    "\(answer)")
            // b changes (a held document and a new one) are not delivered any more; a still is.
            _ = try await SyncEndpointTests.execute(http, service.port, key: key, "UPDATE b SET v = 1 WHERE _id = 'b-held'")
            _ = try await SyncEndpointTests.execute(http, service.port, key: key, "INSERT INTO b DOCUMENTS ({'_id': 'b-new'})")
            _ = try await SyncEndpointTests.execute(http, service.port, key: key, "INSERT INTO a DOCUMENTS ({'_id': 'a-new'})")
            let after = try await peer.waitFor { Self.delivers([$0], "a-new") }
            let leaked = after.contains { m in
                if case .changes(_, let e) = m { e.contains { $0.document.collection == "b" } } else { false }
            }
            #expect(!leaked, "b was delivered after the scope narrowed: \(after)")
        }
    }

    static func delivers(_ messages: [SyncMessage], _ id: Value) -> Bool {
        messages.contains { m in
            switch m {
            case .documents(_, let e), .changes(_, let e): e.contains { $0.document.id == id }
            default: false
            }
        }
    }
}

/// Not a regression test: the memory measurement of issue #16 item 5, run on demand
/// (`BIGPEER_MEASURE_SYNC_RSS=1 swift test --filter SyncSessionMemoryMeasurement`): 100 peers that
/// grant 1 GiB of credit, subscribe to ~8 MB and never read. Prints the process's RSS before,
/// while they are connected, after they left (the server trims the heap itself: `HeapTrim`), and
/// after one more `malloc_trim` (what is left to gain).
@Suite struct SyncSessionMemoryMeasurement {
    static func rssKB() -> Int {
        guard let f = fopen("/proc/self/status", "r") else { return -1 }
        defer { fclose(f) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, Int32(line.count), f) != nil {
            let s = String(cString: line)
            if s.hasPrefix("VmRSS:") { return Int(s.split(separator: " ").dropFirst().first ?? "") ?? -1 }
        }
        return -1
    }

    @Test(.enabled(if: getenv("BIGPEER_MEASURE_SYNC_RSS") != nil))
    func hundredPeersThatNeverRead() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await SyncSessionBoundsTests.insecureServer(db) { $0.maxBodyBytes = 64 << 20 }
            defer { Task { await service.stop() } }
            let http = try HTTPClient()
            try await SyncSessionBoundsTests.insert(128, into: "big", blob: String(repeating: "y", count: 64 << 10), http, service.port)
            let before = Self.rssKB()
            var fds: [Int32] = []
            for i in 0..<100 {
                fds.append(try await RawSocket.stuckSyncPeer(port: service.port, site: UInt64(1000 + i), maxMessageSize: 1 << 20,
                                                             subscribingTo: ["SELECT * FROM big"]))
            }
            _ = await eventually(within: .seconds(30)) {
                let s = service.syncQueueStatistics
                return s.count == 100 && s.allSatisfy { $0.queued >= 1 << 20 }
            }
            try await Task.sleep(for: .seconds(1))
            let connected = Self.rssKB()
            let stats = service.syncQueueStatistics
            let peak = stats.map(\.peak).max() ?? 0
            let queued = stats.map(\.queued).reduce(0, +)
            for fd in fds { close(fd) }
            _ = await eventually { service.syncConnections == 0 }
            try await Task.sleep(for: .seconds(2))  // the server's own trim runs 1 s after the sessions end
            let after = Self.rssKB()
            typealias Trim = @convention(c) (Int) -> Int32
            if let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") { _ = unsafeBitCast(sym, to: Trim.self)(0) }
            let trimmed = Self.rssKB()
            print("SYNC-RSS before=\(before / 1024) MB connected=\(connected / 1024) MB (queued \(queued >> 20) MiB in total, peak per session \(peak >> 10) KiB) after=\(after / 1024) MB after-trim=\(trimmed / 1024) MB")
        }
    }
}
