import Auth
import BigPeerServer
import BigPeerTestSupport
import HTTP
import Logging
import Metrics
import Postgres
import ServerTestSupport
import Sockets
import SyncProtocol
import Testing
import Values

/// The abuse limits and the audit log through a real server over real sockets, on a stepped clock:
/// 429 with `Retry-After` per address and per credential, failed authentications throttling one
/// address and not another, sync handshakes counted like requests, audit lines without secrets.
@Suite struct AbuseLimitsEndpointTests {
    static let loops = try! EventLoopGroup(threads: 1)

    struct Harness {
        let server: InProcessServer
        let clock: SteppedClock
        let audit: MutexBox<[String]>

        func rest(_ key: String?, host: String = "127.0.0.1") -> RESTClient {
            var r = server.rest(key: key)
            r.host = host
            return r
        }
        var auditLines: [String] { audit.withLock { $0 } }

        /// A sample of the server's metrics exposition (`name` with its labels), as Prometheus reads it.
        func metric(_ name: String) -> Double? {
            ServiceMetrics.registry(for: server.service).exposition().split(separator: "\n")
                .first { $0.hasPrefix(name + " ") }.flatMap { Double($0.dropFirst(name.count + 1)) }
        }
    }

    /// A server whose only limits are those `configure` sets (throttling included), on a stepped clock.
    static func withServer(host: String = "127.0.0.1", audit: AuditLogMode = .denials, _ configure: (inout AbuseLimits) -> Void,
                           _ body: (Harness) async throws -> Void) async throws {
        let clock = SteppedClock(), lines = MutexBox<[String]>([])
        try await InProcessServer.with({ config in
            config.databaseConnections = 4
            config.host = host
            var limits = AbuseLimits()
            limits.failedAuthentication = nil
            limits.clock = { clock.now() }
            configure(&limits)
            config.abuseLimits = limits
            config.auditLog = audit
            config.auditLogger = Logger(label: "bigpeer.audit") { _ in AuditRecorder(lines: lines) }
        }) { server in
            try await body(Harness(server: server, clock: clock, audit: lines))
        }
    }

    static func rate(_ perSecond: Double, _ burst: Double) -> TokenBucketRate { TokenBucketRate(perSecond: perSecond, burst: burst)! }

    static func errorDescription(_ r: RESTReply) -> String? {
        guard case .object(let e)? = r["error"], case .string(let d)? = e["description"] else { return nil }
        return d
    }

    @Test func perAddress_429WithRetryAfterAndTheErrorBody_thenRefills() async throws {
        try await Self.withServer({ $0.perAddress = Self.rate(1, 2) }) { h in
            let key = try await h.server.newKey()
            let client = h.rest(key)
            #expect(try await client.execute("SELECT * FROM cars").status == 200)
            #expect(try await client.execute("SELECT * FROM cars").status == 200)
            let refused = try await client.execute("SELECT * FROM cars")
            #expect(refused.status == 429)
            #expect(refused.headers["Retry-After"] == "1")
            #expect(refused["queryType"] == "unknown", "the execute route's envelope")
            #expect(Self.errorDescription(refused)?.contains("too many requests from this address") == true)
            let legacy = try await client.post("/api/v4/store/count", ["collection": "cars"])
            #expect(legacy.status == 429)
            if case .object(let e)? = legacy["error"] { #expect(e["status"] == 429) } else { Issue.record("\(legacy.text)") }
            #expect(try await h.server.http.get(h.server.base + "/healthz").status.code == 200, "health checks are not limited")
            #expect(h.metric("bigpeer_requests_limited_total{limit=\"address\"}") == 2)
            h.clock.advance(.seconds(1))
            #expect(try await client.execute("SELECT * FROM cars").status == 200)
            #expect(h.auditLines.contains { $0.contains("decision=denied") && $0.contains("why=429 address rate limit") })
        }
    }

    /// `::` takes IPv4 (mapped) and IPv6 clients: two addresses over real sockets.
    @Test func failedAuthentications_throttleTheirAddress_notAnother() async throws {
        try await Self.withServer(host: "::", { $0.failedAuthentication = Self.rate(0.1, 3) }) { h in
            let key = try await h.server.newKey()
            let wrong = String(key.dropLast()) + (key.last == "0" ? "1" : "0")
            for _ in 0..<3 { #expect(try await h.rest(wrong).execute("SELECT * FROM cars").status == 401) }
            let blocked = try await h.rest(key).execute("SELECT * FROM cars")
            #expect(blocked.status == 429, "even the right key, from the guessing address")
            #expect(blocked.headers["Retry-After"] == "10")
            #expect(Self.errorDescription(blocked)?.contains("too many failed authentications") == true)
            // The key's holder on another address is not locked out, and its successes give the
            // guessing address nothing back.
            for _ in 0..<3 { #expect(try await h.rest(key, host: "::1").execute("SELECT * FROM cars").status == 200) }
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 429)
            // Ten seconds give one failure back; a request without credentials is no failure.
            h.clock.advance(.seconds(10))
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 200)
            #expect(try await h.rest(nil).execute("SELECT * FROM cars").status == 401)
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 200)
            #expect(try await h.rest(wrong).execute("SELECT * FROM cars").status == 401)
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 429)
        }
    }

    @Test func anIPv6Client_isLimitedByItsAddress() async throws {
        try await Self.withServer(host: "::1", { $0.perAddress = Self.rate(1, 1) }) { h in
            let key = try await h.server.newKey()
            #expect(try await h.rest(key, host: "::1").execute("SELECT * FROM cars").status == 200)
            #expect(try await h.rest(key, host: "::1").execute("SELECT * FROM cars").status == 429)
            #expect(h.auditLines.contains { $0.contains("address=[::1]:") })
        }
    }

    @Test func perCredential_aForgedIDCannotSpendTheKeysBucket() async throws {
        try await Self.withServer({ $0.perCredential = Self.rate(1, 2) }) { h in
            let a = try await h.server.newKey(), b = try await h.server.newKey()
            let forged = String(a.dropLast()) + (a.last == "0" ? "1" : "0")
            for _ in 0..<5 { #expect(try await h.rest(forged).execute("SELECT * FROM cars").status == 401) }
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            let refused = try await h.rest(a).execute("SELECT * FROM cars")
            #expect(refused.status == 429)
            #expect(refused.headers["Retry-After"] == "1")
            #expect(Self.errorDescription(refused)?.contains("too many requests with these credentials") == true)
            #expect(try await h.rest(b).execute("SELECT * FROM cars").status == 200, "another key has its own bucket")
            h.clock.advance(.seconds(1))
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
        }
    }

    /// With a server-time limit, what a key's requests took is charged after they answered: on a
    /// frozen clock one second of burst runs out, then 429 until the bucket refills; another key
    /// goes on.
    @Test func serverTimePerCredential_chargesWhatRequestsTook_then429() async throws {
        try await Self.withServer({ $0.serverTimePerCredential = Self.rate(1, 1); $0.serverTimeWait = .zero }) { h in
            let a = try await h.server.newKey(), b = try await h.server.newKey()
            // The first request leaves the bucket under one second whatever it took.
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            let refused = try await h.rest(a).execute("SELECT * FROM cars")
            #expect(refused.status == 429)
            #expect(refused.headers["Retry-After"] == "1")
            #expect(Self.errorDescription(refused)?.contains("used their share of the server's time") == true)
            #expect(try await h.rest(b).execute("SELECT * FROM cars").status == 200, "another key has its own time")
            h.clock.advance(.seconds(3))  // whatever the requests took: the debt is at most one burst
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            #expect(h.auditLines.contains { $0.contains("429 credential server time limit") }, "\(h.auditLines)")
        }
    }

    /// Over its server time, a request waits for the share to come back (up to
    /// `serverTimeWait`) and then runs, rather than being refused at once: a client that sends
    /// again as soon as it is refused is paced, not answered thousands of times a second.
    @Test func serverTimePerCredential_aRequestOverItWaitsForItsShare() async throws {
        try await Self.withServer({ $0.serverTimePerCredential = Self.rate(1, 1); $0.serverTimeWait = .seconds(60) }) { h in
            let a = try await h.server.newKey()
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            let waiting = Task { try await h.rest(a).execute("SELECT * FROM cars").status }
            #expect(try await eventually { h.metric("bigpeer_server_time_waiting_requests") == 1 }, "it waits, on a frozen clock")
            h.clock.advance(.seconds(3))  // the share is back, whatever the first request took (debt is at most a burst): the waiting request's next look lets it run
            #expect(try await waiting.value == 200)
            #expect(h.metric("bigpeer_server_time_waiting_requests") == 0)
            #expect(h.metric("bigpeer_server_time_waited_requests_total") == 1)
            #expect(h.metric("bigpeer_requests_limited_total{limit=\"credential_server_time\"}") == 0, "it waited: not refused")
        }
        // A wait longer than allowed is not waited out: `serverTimeWait` zero refuses at once (above).
    }

    /// At most `serverTimeMaxWaiting` requests of one credential wait (each holds its body); the
    /// next is refused at once.
    @Test func serverTimePerCredential_boundsTheRequestsWaiting() async throws {
        try await Self.withServer({
            // A long allowed wait, so that a refusal "at once" is told from a wait however loaded the machine.
            $0.serverTimePerCredential = Self.rate(1, 1); $0.serverTimeWait = .seconds(60); $0.serverTimeMaxWaiting = 1
        }) { h in
            let a = try await h.server.newKey()
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 200)
            let waiting = Task { try await h.rest(a).execute("SELECT * FROM cars").status }
            #expect(try await eventually { h.metric("bigpeer_server_time_waiting_requests") == 1 })
            let started = ContinuousClock.now
            #expect(try await h.rest(a).execute("SELECT * FROM cars").status == 429)
            #expect(ContinuousClock.now - started < .seconds(30), "refused at once, not after a wait of up to 60 s")
            #expect(h.metric("bigpeer_requests_limited_total{limit=\"credential_server_time\"}") == 1)
            h.clock.advance(.seconds(3))
            #expect(try await waiting.value == 200)
        }
    }

    /// A key created with a time limit of its own (`keys create --time-limit`) is paced with the
    /// server's limit off; the operator's own key, created without one, is never charged.
    @Test func aKeysOwnTimeLimit_pacesThatKeyAlone() async throws {
        try await Self.withServer({ $0.serverTimeWait = .zero }) { h in
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let (stored, token) = try await h.server.keys.create(description: "partner", expiresAt: expires, read: .all, write: .all,
                                                                 timeLimit: Self.rate(1, 1))
            #expect(stored.timeLimit == Self.rate(1, 1))
            let partner = token.text, ours = try await h.server.newKey()
            // The first request loads the key, and with it its share: it is charged too.
            #expect(try await h.rest(partner).execute("SELECT * FROM cars").status == 200)
            let refused = try await h.rest(partner).execute("SELECT * FROM cars")
            #expect(refused.status == 429)
            #expect(Self.errorDescription(refused)?.contains("used their share of the server's time") == true)
            for _ in 0..<5 { #expect(try await h.rest(ours).execute("SELECT * FROM cars").status == 200, "no share of its own, none on the server") }
            h.clock.advance(.seconds(3))
            #expect(try await h.rest(partner).execute("SELECT * FROM cars").status == 200)
        }
    }

    @Test func auditLines_sayWhoWhatAndWhy_neverTheSecret() async throws {
        try await Self.withServer(audit: .all, { $0.failedAuthentication = Self.rate(0.1, 20) }) { h in
            let key = try await h.server.newKey(read: .only(["cars"]), write: .none)
            let id = try #require(APIKeyToken(parsing: key)).id
            let secret = String(key.split(separator: "_").last!)
            let wrong = String(key.dropLast()) + (key.last == "0" ? "1" : "0")
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 200)
            #expect(try await h.rest(key).execute("INSERT INTO cars DOCUMENTS ({_id: 'x'})").status == 403)
            #expect(try await h.rest(wrong).execute("SELECT * FROM cars").status == 401)
            let lines = h.auditLines
            let route = "what=POST /api/v4/store/execute"
            #expect(lines.contains { $0.contains("decision=allowed") && $0.contains("who=\(id)") && $0.contains(route) && $0.contains("status=200") },
                    "\(lines)")
            #expect(lines.contains { $0.contains("decision=denied") && $0.contains("who=\(id)") && $0.contains("verified=true")
                                     && $0.contains("why=403 not permitted: this key cannot write collection cars") }, "\(lines)")
            #expect(lines.contains { $0.contains("decision=denied") && $0.contains("who=\(id)") && $0.contains("verified=false")
                                     && $0.contains("why=401 the API key is not valid") && $0.contains("address=127.0.0.1:") }, "\(lines)")
            #expect(lines.allSatisfy { !$0.contains(secret) && !$0.contains(String(wrong.suffix(64))) }, "no line holds a secret")
            #expect(lines.allSatisfy { $0.hasPrefix("notice ") || $0.hasPrefix("info ") })
        }
    }

    @Test func syncHandshakes_countAgainstTheAddress_andFailedOnesThrottleIt() async throws {
        try await Self.withServer({ $0.perAddress = Self.rate(1, 3); $0.failedAuthentication = Self.rate(0.1, 2) }) { h in
            let key = try await h.server.newKey()
            let port = h.server.port
            let peer = try await SyncTestClient(port: port, loop: Self.loops.next())
            peer.send(Self.hello(site: 0xA1, .apiKey(key)))
            guard case .welcome = try await peer.nextMessage() else { Issue.record("not welcomed"); return }
            // Two wrong keys: refused 4001, and they use up the address's failures.
            for site: UInt64 in [0xA2, 0xA3] {
                let c = try await SyncTestClient(port: port, loop: Self.loops.next())
                c.send(Self.hello(site: site, .apiKey(String(key.dropLast()) + (key.last == "0" ? "1" : "0"))))
                guard case .refuse(4001, _) = try await c.nextMessage() else { Issue.record("a wrong key was not refused 4001"); return }
            }
            let throttled = try await SyncTestClient(port: port, loop: Self.loops.next())
            throttled.send(Self.hello(site: 0xA4, .apiKey(key)))
            guard case .refuse(4003, let reason) = try await throttled.nextMessage() else { Issue.record("not refused 4003"); return }
            #expect(reason.contains("too many failed authentications"))
            #expect(RetryHint.seconds(in: reason) == 10)
            #expect(try await h.rest(key).execute("SELECT * FROM cars").status == 429, "REST from the same address too")
            #expect(h.metric("bigpeer_requests_limited_total{limit=\"failed_authentication\"}") == 2, "a handshake and a request")
            // Ten seconds give one failure back and refill the address's three handshakes.
            h.clock.advance(.seconds(10))
            var open: [SyncTestClient] = []
            for site: UInt64 in [0xA5, 0xA6, 0xA7] {
                let c = try await SyncTestClient(port: port, loop: Self.loops.next())
                c.send(Self.hello(site: site, .apiKey(key)))
                guard case .welcome = try await c.nextMessage() else { Issue.record("not welcomed after the wait"); return }
                open.append(c)
            }
            let fourth = try await SyncTestClient(port: port, loop: Self.loops.next())
            fourth.send(Self.hello(site: 0xA8, .apiKey(key)))
            guard case .refuse(4003, let busy) = try await fourth.nextMessage() else { Issue.record("a fourth handshake was not refused"); return }
            #expect(busy.contains("too many handshakes from this address"))
            #expect(RetryHint.seconds(in: busy) == 1)
            #expect(h.auditLines.contains { $0.contains("what=sync handshake") && $0.contains("why=4001") && $0.contains("link=WebSocket") }, "\(h.auditLines)")
        }
    }

    static func hello(site: UInt64, _ credentials: SyncCredentials?) -> SyncMessage {
        .hello(Hello(site: site, peerKey: [7, 7], deviceName: "test-\(site)", credentials: credentials, credit: 1 << 20, maxMessageSize: 1 << 20))
    }
}

/// Keeps each audit line as `level message key=value…` (metadata in key order).
struct AuditRecorder: LogHandler {
    let lines: MutexBox<[String]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let fields = (event.metadata ?? [:]).merging(metadata) { a, _ in a }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        lines.withLock { $0.append(([("\(event.level) \(event.message)")] + fields).joined(separator: " ")) }
    }
}
