import BigPeerTestSupport
@testable import ConnectionPolicy
import SyncProtocol
import Testing
import Values

/// The connection webhook against a real HTTP server: what it sends, and that only a clear
/// 2xx `allow` allows — a denial, a timeout, a refused connection, a non-2xx status, a redirect,
/// garbage and an oversized answer all deny.
@Suite struct ConnectionWebhookTests {
    static func webhook(_ url: String, timeout: Duration = .seconds(10)) throws -> ConnectionWebhook {
        var c = ConnectionWebhook.Configuration(url: url)
        c.timeout = timeout
        return try ConnectionWebhook(c)
    }

    static func answers(_ path: String, _ body: Value) -> WebhookTestServer.Answer {
        switch path {
        case "/allow": .json(["authorization": "allow"])
        case "/deny": .json(["authorization": "deny", "reason": "not on this ship", "retryAfterSeconds": 120])
        case "/deny-plain": .json(["authorization": "deny"])
        case "/hang": .hang
        case "/garbage": .respond(status: 200, body: Array("<html>hello</html>".utf8))
        case "/maybe": .json(["authorization": "maybe"])
        case "/error": .json(["authorization": "allow"], status: 500)
        case "/redirect": .respond(status: 302, body: [])
        case "/huge": .json(["authorization": "allow", "pad": .string(String(repeating: "x", count: 100 << 10))])
        default: .respond(status: 404, body: [])
        }
    }

    @Test func answers_allowOnlyWhenClear() async throws {
        try await WebhookTestServer.with(Self.answers) { server in
            let c = candidate(key: [0xA1, 0xB2], name: "tablet-7", meta: ["role": "crew"], link: .accessPoint, principal: "k_1")
            let cases: [(String, ConnectionDecision, Bool)] = [
                ("/allow", .allow, false),
                ("/deny", .deny(reason: "not on this ship", retryAfterSeconds: 120), false),
                ("/deny-plain", .deny(reason: "denied by the connection webhook", retryAfterSeconds: 60), false),
                ("/garbage", .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10), true),
                ("/maybe", .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10), true),
                ("/error", .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10), true),
                ("/redirect", .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10), true),
                ("/huge", .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10), true),
            ]
            for (path, expected, failed) in cases {
                let hook = try Self.webhook(server.url(path))
                let verdict = await hook.decide(c)
                await hook.shutdown()
                #expect(verdict.decision == expected, "\(path): \(verdict)")
                #expect((verdict.failure != nil) == failed, "\(path): \(verdict)")
            }
            // What the webhook was told.
            #expect(server.bodies.first == [
                "peerKey": "a1b2", "deviceName": "tablet-7", "peerMetadata": ["role": "crew"], "connectionType": "AccessPoint",
                "remoteAddress": "10.0.0.7:5000", "principal": "k_1",
            ])
        }
    }

    @Test func timeoutAndRefusedConnection_deny() async throws {
        try await WebhookTestServer.with(Self.answers) { server in
            let hook = try Self.webhook(server.url("/hang"), timeout: .milliseconds(200))
            let verdict = await hook.decide(candidate())
            await hook.shutdown()
            #expect(verdict.decision == .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10))
            #expect(verdict.failure == "timed out")
        }
        // A port nobody listens on any more (were it taken again meanwhile, by another test's
        // webhook, the path answers 404: a denial still).
        let closed = try await WebhookTestServer.with(Self.answers) { $0.port }
        let hook = try Self.webhook("http://127.0.0.1:\(closed)/nobody")
        let verdict = await hook.decide(candidate())
        await hook.shutdown()
        #expect(verdict.failure != nil, "\(verdict)")
        #expect(verdict.decision == .deny(reason: "the connection webhook did not allow this peer", retryAfterSeconds: 10))
    }

    /// Sixteen candidates at once: the webhook answers none until all sixteen have arrived, so
    /// the calls must be in flight together (one at a time would leave each waiting for the
    /// next until the 10 s timeout denied it).
    @Test func manyCandidatesAtOnce_waitSideBySide() async throws {
        let count = 16
        let gate = MutexBox<[CheckedContinuation<Void, Never>]>([])
        try await WebhookTestServer.with({ _, _ in
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let waiting = gate.withLock { w -> [CheckedContinuation<Void, Never>] in
                    w.append(c)
                    return w.count == count ? w : []
                }
                for w in waiting { w.resume() }
            }
            return .json(["authorization": "allow"])
        }) { server in
            let hook = try Self.webhook(server.url("/allow"))
            let verdicts = await withTaskGroup(of: PolicyVerdict.self) { group in
                for i in 0..<count {
                    group.addTask { await hook.decide(candidate(key: [UInt8(i)])) }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            await hook.shutdown()
            #expect(verdicts.count == count)
            #expect(verdicts.allSatisfy { $0.decision == .allow }, "\(verdicts.filter { $0.decision != .allow })")
            #expect(server.bodies.count == count)
        }
    }

    @Test func badURL_isRefusedAtStart() {
        #expect(throws: PolicyConfigurationError.self) { try Self.webhook("ftp://example.com/hook") }
    }
}
