@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import DQL
import ServerTestSupport
import HTTP
import Testing
import Values

/// The authentication webhook (#21 item 2, Ditto's contract): the answer's parsing, the cache and
/// its expiry on a manual clock, and REST through a real server with a real webhook server that
/// grants, refuses, hangs, fails and lies.
@Suite struct AuthWebhookTests {
    static func grant(_ answer: Value) -> Result<AuthWebhook.Grant, AuthWebhookError> {
        AuthWebhook.grant(JSON.serialize(answer), provider: "corp", now: 1_000)
    }

    @Test func theAnswerBecomesAPrincipal() throws {
        let g = try Self.grant([
            "authenticated": true, "userID": "u-1", "expirationSeconds": 600,
            "permissions": ["read": ["everything": false, "queriesByCollection": ["orders": ["true"], "books": ["_id.site == 'A'"]]],
                            "write": ["everything": false, "queriesByCollection": ["orders": ["_id.site == 'A'", "true"]]], "remoteQuery": false],
            "clientInfo": ["welcome": "hi"], "identityServiceMetadata": ["site": "A"],
        ]).get()
        #expect(g.principal.keyID == "webhook:corp:u-1")
        // Queries are rules, parsed as a JWT's permissions claim: "true" opens a collection whole.
        #expect(g.principal.read == .only(["orders", "books"]) && g.principal.write == .only(["orders"]))
        #expect(g.principal.readRules.condition(for: "orders") == .literal(.bool(true)))
        #expect(g.principal.readRules.condition(for: "books") != nil)
        #expect(g.principal.writeRules.condition(for: "orders") == .literal(.bool(true)), "a rule ORed with true is true")
        let ruled = try Self.grant([
            "authenticated": true, "userID": "u-2", "expirationSeconds": 600, "identityServiceMetadata": ["site": "A"],
            "permissions": ["write": ["queriesByCollection": ["orders": ["site = :claims.identityServiceMetadata.site"]]]],
        ]).get()
        #expect(try ruled.principal.writeRules.allowsWrite(before: nil, after: ["_id": "o", "site": "A"], in: "orders", nowMilliseconds: 0))
        #expect(try !ruled.principal.writeRules.allowsWrite(before: nil, after: ["_id": "o", "site": "B"], in: "orders", nowMilliseconds: 0))
        #expect(g.principal.claims["identityServiceMetadata"] == ["site": "A"])
        #expect(g.principal.claims["userID"] == "u-1" && g.principal.claims["provider"] == "corp")
        #expect(g.refusedFrom == 1_600 && g.clientInfo == ["welcome": "hi"] && g.identityMetadata == ["site": "A"])
        let all = try Self.grant(["authenticated": true, "userID": "u", "expirationSeconds": 1,
                                  "permissions": ["read": ["everything": true], "write": ["everything": true]]]).get()
        #expect(all.principal.read == .all && all.principal.write == .all)
        let none = try Self.grant(["authenticated": true, "userID": "u", "expirationSeconds": 1]).get()
        #expect(none.principal.read == .none && none.principal.write == .none)
    }

    @Test func refusalsAndAnswersThatAreNotTheContract() {
        guard case .failure(.notAuthenticated) = Self.grant(["authenticated": false]) else { Issue.record("accepted"); return }
        let lies: [Value] = [
            [], "yes", ["authenticated": "true"], ["authenticated": true, "expirationSeconds": 60],
            ["authenticated": true, "userID": "", "expirationSeconds": 60], ["authenticated": true, "userID": "u"],
            ["authenticated": true, "userID": "u", "expirationSeconds": -1], ["authenticated": true, "userID": "u", "expirationSeconds": 1.5],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "permissions": ["read": ["everything": "yes"]]],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "permissions": ["read": ["queriesByCollection": ["c": "true"]]]],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "permissions": ["write": ["queriesByCollection": ["": ["true"]]]]],
            // What goes into presence and back to peers is bounded (4 KiB, 16 KiB encoded) and shaped.
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "identityServiceMetadata": "site A"],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60,
             "identityServiceMetadata": ["notes": .string(String(repeating: "x", count: 4 << 10))]],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "clientInfo": .string(String(repeating: "x", count: 16 << 10))],
            ["authenticated": true, "userID": "u", "expirationSeconds": 60, "permissions": ["write": ["queriesByCollection": ["c": ["length(a) > 1"]]]]],
        ]
        for lie in lies {
            guard case .failure(.badAnswer) = Self.grant(lie) else { Issue.record("not refused as a bad answer: \(lie)"); continue }
        }
        guard case .failure(.badAnswer) = AuthWebhook.grant(Array(#"{"authenticated": true, "authenticated": false}"#.utf8), provider: "p", now: 0) else {
            Issue.record("duplicate keys accepted")
            return
        }
    }

    /// The webhook every end-to-end test here talks to: the token says how it answers.
    static func answer(_ token: String) async -> WebhookTestServer.Answer {
        let grant: (Int64) -> Value = { seconds in
            ["authenticated": true, "userID": .string("user-" + token), "expirationSeconds": .int(seconds),
             "permissions": ["read": ["queriesByCollection": ["orders": ["true"]]], "write": ["queriesByCollection": ["orders": ["true"]]]]]
        }
        switch token {
        case "good", "eyJh.eyJz.c2ln": return .json(grant(3600))
        case "short": return .json(grant(2))
        case "nope": return .json(["authenticated": false])
        case "boom": return .respond(status: 500, body: Array("oops".utf8))
        case "liar": return .respond(status: 200, body: Array("<html>".utf8))
        case "slow": return .hang
        default: return .json(["authenticated": false])
        }
    }

    static func token(_ body: Value) -> String {
        if case .object(let o) = body, case .string(let t)? = o["token"] { return t }
        return ""
    }

    @Test func grantsAreCachedUntilTheyExpire_onAManualClock() async throws {
        try await WebhookTestServer.with({ _, body in await Self.answer(Self.token(body)) }) { server in
            let clock = MutexBox<Int64>(1_000)
            var config = AuthWebhook.Configuration(providers: ["corp": server.url("/auth")])
            config.databaseID = "db-1"
            let webhook = try AuthWebhook(config, now: { clock.withLock { $0 } })
            defer { Task { await webhook.shutdown() } }
            #expect(try await webhook.authenticate(provider: "corp", token: "short").get().refusedFrom == 1_002)
            #expect(server.bodies == [["version": "1", "provider": "corp", "token": "short", "databaseID": "db-1"]])
            clock.withLock { $0 = 1_001 }
            #expect((try? await webhook.authenticate(provider: "corp", token: "short").get()) != nil)
            #expect(server.bodies.count == 1)  // from the cache
            clock.withLock { $0 = 1_002 }
            #expect(try await webhook.authenticate(provider: "corp", token: "short").get().refusedFrom == 1_004)
            #expect(server.bodies.count == 2)  // expired: asked again
            // A refusal is cached for `refusalSeconds` (10), by the token's hash; failures are not cached.
            for _ in 0..<3 { guard case .failure(.notAuthenticated) = await webhook.authenticate(provider: "corp", token: "nope") else { Issue.record("nope"); return } }
            #expect(server.bodies.count == 3 && webhook.cachedRefusalCount == 1)
            clock.withLock { $0 = 1_011 }
            _ = await webhook.authenticate(provider: "corp", token: "nope")
            #expect(server.bodies.count == 3)
            clock.withLock { $0 = 1_012 }
            _ = await webhook.authenticate(provider: "corp", token: "nope")
            #expect(server.bodies.count == 4)  // the refusal ran out: asked again
            for _ in 0..<2 { guard case .failure(.unavailable) = await webhook.authenticate(provider: "corp", token: "boom") else { Issue.record("boom"); return } }
            #expect(server.bodies.count == 6)
            guard case .failure(.unknownProvider("other")) = await webhook.authenticate(provider: "other", token: "good") else { Issue.record("other"); return }
            #expect(server.bodies.count == 6)
        }
    }

    /// 64 callers missing the cache for one token at once (a fleet reconnecting) make one POST;
    /// a failed call is shared by the callers that waited on it and not kept; a refusal is cached
    /// as before.
    @Test func concurrentMissesOfOneToken_shareOneWebhookCall() async throws {
        let entered = MutexBox(0)  // callers of a burst that have called `authenticate`
        try await WebhookTestServer.with({ _, body in
            // The webhook answers once all 64 callers of the burst are in (however slow the
            // machine), and a moment more for the last of them to find the call in flight.
            _ = await eventually { entered.withLock { $0 } % 64 == 0 }
            try? await Task.sleep(for: .milliseconds(50))
            return await Self.answer(Self.token(body))
        }) { server in
            let webhook = try AuthWebhook(AuthWebhook.Configuration(providers: ["corp": server.url("/auth")]))
            defer { Task { await webhook.shutdown() } }
            func burst(_ token: String) async -> [Result<AuthWebhook.Grant, AuthWebhookError>] {
                await withTaskGroup(of: Result<AuthWebhook.Grant, AuthWebhookError>.self) { group in
                    for _ in 0..<64 {
                        group.addTask {
                            entered.withLock { $0 += 1 }
                            return await webhook.authenticate(provider: "corp", token: token)
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
            }
            let granted = await burst("good")
            #expect(granted.allSatisfy { (try? $0.get())?.principal.keyID == "webhook:corp:user-good" }, "\(granted.prefix(2))")
            #expect(server.bodies.count == 1)
            #expect((try? await webhook.authenticate(provider: "corp", token: "good").get()) != nil)
            #expect(server.bodies.count == 1, "then from the cache")

            let failed = await burst("boom")
            #expect(failed.allSatisfy { if case .failure(.unavailable) = $0 { true } else { false } })
            #expect(server.bodies.count == 2)
            guard case .failure(.unavailable) = await webhook.authenticate(provider: "corp", token: "boom") else { Issue.record("boom"); return }
            #expect(server.bodies.count == 3, "a failure is not kept: the next caller asks again")

            let refused = await burst("nope")
            #expect(refused.allSatisfy { if case .failure(.notAuthenticated) = $0 { true } else { false } })
            _ = await webhook.authenticate(provider: "corp", token: "nope")
            #expect(server.bodies.count == 4, "one call for the burst, then the cached refusal")
        }
    }

    @Test func rest_bearerWithXAuthProvider_401_503_andScopes() async throws {
        try await WebhookTestServer.with({ _, body in await Self.answer(Self.token(body)) }) { server in
            try await withServer({ config in
                var webhook = AuthWebhook.Configuration(providers: ["corp": server.url("/auth")])
                // Long enough for a loaded CI machine's first webhook round trip (500 ms once was
                // not: 503 for a good token); the "slow" token hangs and waits it out once.
                webhook.timeout = .seconds(3)
                config.authWebhook = webhook
            }) { s in
                func run(_ statement: String, token: String, provider: String? = "corp") async throws -> RESTReply {
                    var h = JWTEndToEndTests.bearer(token)
                    if let provider { h.add("X-Auth-Provider", provider) }
                    return try await s.rest().execute(statement, headers: h)
                }
                #expect(try await run("INSERT INTO orders DOCUMENTS ({'_id': 'o1'})", token: "good").status == 200)
                #expect(try await run("SELECT * FROM orders", token: "good")["items"] == [["_id": "o1"]])
                #expect(server.bodies.count == 1)  // the second request was served from the cache
                let forbidden = try await run("SELECT * FROM people", token: "good")
                #expect(forbidden.status == 403)
                #expect(forbidden.text.contains("not permitted: this token of provider corp cannot read collection people"), "\(forbidden.text)")
                // A JWT-shaped token with X-Auth-Provider is the provider's, not verified as a JWT.
                #expect(try await run("SELECT * FROM orders", token: "eyJh.eyJz.c2ln").status == 200)
                let refused = try await run("SELECT * FROM orders", token: "nope")
                #expect(refused.status == 401)
                #expect(refused.headers["WWW-Authenticate"]?.contains(#"error="invalid_token""#) == true)
                for failing in ["boom", "liar", "slow"] {
                    let r = try await run("SELECT * FROM orders", token: failing)
                    #expect(r.status == 503, "\(failing): \(r.text)")
                    #expect(r.headers["Retry-After"] == "2", "\(failing)")
                }
                let unknown = try await run("SELECT * FROM orders", token: "good", provider: "other")
                #expect(unknown.status == 401)
                #expect(unknown.headers["WWW-Authenticate"]?.contains(#"error="invalid_request""#) == true)
                // Without the header, the same token is neither an API key nor a JWT.
                #expect(try await run("SELECT * FROM orders", token: "good", provider: nil).status == 401)
            }
        }
    }
}
