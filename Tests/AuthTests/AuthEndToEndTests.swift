@testable import Auth
@testable import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Metrics
import Postgres
import Testing
import Values

/// Every endpoint except /healthz and /readyz requires a valid key with the right scope.
@Suite struct AuthEndToEndTests {
    @Test func healthNeedsNoKeyButStoreDoes() async throws {
        try await withServer { s in
            #expect(try await s.http.get(s.base + "/healthz").status.code == 200)
            #expect(try await s.http.get(s.base + "/readyz").status.code == 200)
            for path in ["/api/v4/store/execute", "/api/v4/store/find", "/api/v4/store/findbyid", "/api/v4/store/count", "/api/v4/store/write"] {
                let r = try await s.post(path, ["statement": "SELECT * FROM cars", "collection": "cars"], key: nil)
                #expect(r.status == 401, "\(path)")
                #expect(r.headers["WWW-Authenticate"] == #"Bearer realm="bigpeer""#, "\(path)")
                #expect(r.description?.contains("authentication required") == true, "\(path)")
            }
            // Auth comes before the body: a bad key with a bad body is 401, not 400.
            #expect(try await s.post("/api/v4/store/execute", raw: Array("{".utf8), key: "nope").status == 401)
            // Wrong method: 405 with Allow, from the router.
            let get = try await s.http.get(s.base + "/api/v4/store/find")
            #expect(get.status.code == 405)
            #expect(get.headers["Allow"] == "POST")
            // The /execute error keeps the Ditto shape.
            let r = try await s.execute("SELECT * FROM cars", key: nil)
            #expect(r["queryType"] == "unknown")
            #expect(r["items"] == [])
        }
    }

    @Test func wrongMalformedExpiredAndRevokedKeysGet401() async throws {
        try await withServer { s in
            let good = try await s.newKey()
            #expect(try await s.execute("SELECT * FROM cars", key: good).status == 200)

            // Right id, wrong secret.
            let wrongSecret = String(good.dropLast()) + (good.last == "0" ? "1" : "0")
            let w = try await s.execute("SELECT * FROM cars", key: wrongSecret)
            #expect(w.status == 401)
            #expect(w.description == "the API key is not valid")
            #expect(w.headers["WWW-Authenticate"]?.contains(#"error="invalid_token""#) == true)
            // Unknown id.
            let unknown = try APIKeyToken.generate().text
            #expect(try await s.execute("SELECT * FROM cars", key: unknown).status == 401)
            // Not a BigPeer key / not Bearer.
            let m = try await s.execute("SELECT * FROM cars", key: "hunter2")
            #expect(m.status == 401)
            #expect(m.headers["WWW-Authenticate"]?.contains("invalid_request") == true)
            let basic = try await s.post("/api/v4/store/execute", ["statement": "SELECT * FROM cars"], key: nil,
                                         headers: ["Authorization": "Basic dXNlcjpwYXNz"])
            #expect(basic.status == 401)
            let twice = try await s.post("/api/v4/store/execute", ["statement": "SELECT * FROM cars"], key: good,
                                         headers: ["Authorization": "Bearer \(good)"])
            #expect(twice.status == 401)

            // Expired.
            let expired = try await s.newKey(expiresInSeconds: -1)
            let e = try await s.execute("SELECT * FROM cars", key: expired)
            #expect(e.status == 401)
            #expect(e.description == "the API key has expired")
        }
    }

    @Test func revocationTakesEffectWithinTheCachePeriod() async throws {
        try await withServer({ $0.authCacheTTL = .milliseconds(300) }) { s in
            let key = try await s.newKey()
            #expect(try await s.execute("SELECT * FROM cars", key: key).status == 200)
            let id = try #require(APIKeyToken(parsing: key)).id
            #expect(try await s.keys.revoke(id: id))
            #expect(try await !s.keys.revoke(id: "0000000000000000"))
            // Refused once the 300 ms cache period has passed (the period itself: the Authenticator tests' manual clock).
            var r = try await s.execute("SELECT * FROM cars", key: key)
            #expect(try await eventually { r = try await s.execute("SELECT * FROM cars", key: key); return r.status == 401 })
            #expect(r.description == "the API key has been revoked")
            let listed = try await s.keys.list()
            #expect(listed.count == 1)
            #expect(listed[0].revokedAt != nil)
            #expect(listed[0].lastUsedAt != nil)  // set by the first request
        }
    }

    @Test func scopesAreEnforcedPerCollection() async throws {
        try await withServer { s in
            let admin = try await s.newKey()
            #expect(try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c1', 'color': 'red'})", key: admin).status == 200)
            #expect(try await s.execute("INSERT INTO people DOCUMENTS ({'_id': 'p1'})", key: admin).status == 200)

            // A read-only key cannot write.
            let readOnly = try await s.newKey(read: .all, write: .none)
            #expect(try await s.execute("SELECT * FROM cars", key: readOnly).status == 200)
            let w = try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c2'})", key: readOnly)
            #expect(w.status == 403)
            #expect(w.description == "not permitted: this key cannot write collection cars")
            #expect(w.headers["WWW-Authenticate"]?.contains("insufficient_scope") == true)
            #expect(try await s.execute("UPDATE cars SET color = 'blue'", key: readOnly).status == 403)
            #expect(try await s.execute("DELETE FROM cars", key: readOnly).status == 403)

            // A key for cars cannot read people.
            let cars = try await s.newKey(read: .only(["cars"]), write: .only(["cars"]))
            #expect(try await s.execute("SELECT * FROM cars", key: cars).status == 200)
            let p = try await s.execute("SELECT * FROM people", key: cars)
            #expect(p.status == 403)
            #expect(p.description == "not permitted: this key cannot read collection people")
            #expect(try await s.execute("UPDATE cars SET color = 'blue' WHERE _id = 'c1'", key: cars).status == 200)
            // Server-wide statements need every collection.
            #expect(try await s.execute("ALTER SYSTEM SET DQL_STRICT_MODE = false", key: cars).status == 403)
            #expect(try await s.execute("CREATE INDEX i ON cars (color)", key: cars).status == 403)
            #expect(try await s.execute("SHOW ALL", key: cars).status == 403)
            #expect(try await s.execute("SHOW ALL", key: readOnly).status == 200)
            #expect(try await s.execute("EXPLAIN SELECT * FROM people", key: cars).status == 403)

            // A write-only key cannot UPDATE (its WHERE reads) but can INSERT.
            let writeOnly = try await s.newKey(read: .none, write: .only(["cars"]))
            #expect(try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c3'})", key: writeOnly).status == 200)
            #expect(try await s.execute("UPDATE cars SET color = 'x'", key: writeOnly).status == 403)

            // Nothing the refused statements tried was written.
            let all = try await s.execute("SELECT _id, color FROM cars ORDER BY _id", key: admin)
            #expect(all["items"] == [["_id": "c1", "color": "blue"], ["_id": "c3"]])
            // Legacy endpoints apply the same scopes.
            #expect(try await s.post("/api/v4/store/find", ["collection": "people"], key: cars).status == 403)
            #expect(try await s.post("/api/v4/store/count", ["collection": "people"], key: cars).status == 403)
            #expect(try await s.post("/api/v4/store/findbyid", ["collection": "people", "id": "p1"], key: cars).status == 403)
            let mixed: Value = ["commands": [
                ["method": "upsert", "collection": "cars", "value": ["_id": "c9"]],
                ["method": "upsert", "collection": "people", "value": ["_id": "p9"]],
            ]]
            let mw = try await s.post("/api/v4/store/write", mixed, key: cars)
            #expect(mw.status == 403)
            #expect(try await s.execute("SELECT * FROM cars WHERE _id = 'c9'", key: admin)["items"] == [])
        }
    }

    @Test func insecureDevModeNeedsNoKey() async throws {
        try await withServer({ $0.insecureDevelopment = true }) { s in
            let r = try await s.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a'})", key: nil)
            #expect(r.status == 200)
            #expect(try await s.execute("SELECT * FROM cars", key: "garbage")["items"] == [["_id": "a"]])
        }
    }

    @Test func badStatementsAreStill400AfterAuth() async throws {
        try await withServer { s in
            let key = try await s.newKey()
            let r = try await s.execute("SELEC * FROM cars", key: key)
            #expect(r.status == 400)
            #expect(r.description?.contains("syntax error at 1:1") == true)
            #expect(try await s.post("/api/v4/store/execute", raw: Array("{".utf8), key: key).status == 400)
            #expect(try await s.post("/api/v4/store/execute", raw: Array("{}".utf8), key: key).status == 400)
            var bad = HTTPHeaders()
            bad.add("X-DITTO-TXN-ID", "-1")
            #expect(try await s.post("/api/v4/store/execute", ["statement": "SELECT * FROM cars"], key: key, headers: bad).status == 400)
        }
    }
}

@Suite struct AuthenticatorCacheTests {
    @Test func verifiedKeysAreServedFromMemoryUntilTheTTLThenReread() async throws {
        try await TestPostgresAuth.withKeys { keys in
            let elapsed = MutexBox<Duration>(.zero)
            let origin = ContinuousClock.now
            let auth = Authenticator(keys: keys, cacheTTL: .seconds(5), monotonic: { origin + elapsed.withLock { $0 } })
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let (_, token) = try await keys.create(description: "c", expiresAt: expires, read: .only(["a"]), write: .none)
            let header = "Bearer " + token.text
            #expect(try await auth.authenticate(authorization: header).get() == Principal(keyID: token.id, read: .only(["a"]), write: .none))
            // Delete the row behind the cache's back: within the TTL no database read happens.
            _ = try await keys.pool.query("DELETE FROM api_keys")
            let clock = ContinuousClock()
            let n = 10_000
            let took = try await clock.measure {
                for _ in 0..<n { _ = try await auth.authenticate(authorization: header).get() }
            }
            print("cached key verification: \(took / n) per request")
            // A wrong secret for a cached id is still refused (no cache bypass).
            let wrong = "Bearer " + token.text.dropLast() + (token.text.last == "0" ? "1" : "0")
            #expect(await auth.authenticate(authorization: wrong) == .failure(.invalidKey))
            elapsed.withLock { $0 = .milliseconds(4999) }
            #expect((try? await auth.authenticate(authorization: header).get()) != nil)
            elapsed.withLock { $0 = .seconds(5) }  // the TTL has passed: the key is read again, and is gone
            #expect(await auth.authenticate(authorization: header) == .failure(.invalidKey))
        }
    }

    /// A fleet reconnecting at once with one key: one lookup (and one `last_used_at` update) for
    /// all of them, not one per handshake holding a pooled session each.
    @Test func concurrentMissesOfOneKeyShareOneLookup() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let pool = db.makePool()
            let keys = APIKeyStore(pool: pool)
            let hour = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let (_, token) = try await keys.create(description: "fleet", expiresAt: hour, read: .all, write: .all)
            func acquires() -> UInt64 {
                var counts: [UInt64] = []
                _ = pool.acquireTime.cells.accumulate(series: 0, into: &counts)
                return counts.reduce(0, +)
            }
            let before = acquires()
            let auth = Authenticator(keys: keys)
            let accepted = await withTaskGroup(of: Bool.self) { group in
                for _ in 0..<64 { group.addTask { (try? await auth.authenticate(apiKey: token.text).get()) != nil } }
                return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(accepted == 64)
            #expect(await eventually { acquires() - before == 2 }, "one lookup and one touch")
            #expect(acquires() - before == 2)
        }
    }

    @Test func expiryIsExactEvenWhenCached() async throws {
        try await TestPostgresAuth.withKeys { keys in
            let start = APIKeyStore.now()
            let offset = MutexBox<Int64>(0)
            let auth = Authenticator(keys: keys, cacheTTL: .seconds(60)) {
                PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + offset.withLock { $0 })
            }
            let (_, token) = try await keys.create(description: "e", expiresAt: PostgresTimestamp(microsecondsSince1970: start.microsecondsSince1970 + 60_000_000),
                                                   read: .all, write: .all)
            #expect((try? await auth.authenticate(authorization: "Bearer " + token.text).get()) != nil)
            offset.withLock { $0 = 61_000_000 }  // a minute later, still inside the cache period
            #expect(await auth.authenticate(authorization: "Bearer " + token.text) == .failure(.expiredKey))
        }
    }

    @Test func theCacheStaysBounded() async throws {
        try await TestPostgresAuth.withKeys { keys in
            let auth = Authenticator(keys: keys, cacheTTL: .seconds(60), maxCachedKeys: 3)
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            var tokens: [APIKeyToken] = []
            for _ in 0..<7 { tokens.append(try await keys.create(description: "b", expiresAt: expires, read: .all, write: .all).1) }
            for t in tokens { #expect((try? await auth.authenticate(authorization: "Bearer " + t.text).get()) != nil) }
            #expect(auth.cachedKeyCount <= 3)
        }
    }
}

@Suite struct AuthenticatorUnavailableTests {
    @Test func anUnreachableKeyTableIs503NotA401() async throws {
        // Nothing listens on port 1: every lookup fails to connect.
        let pool = PostgresPool(try PostgresConfiguration(url: "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"), group: TestLoops.group)
        let auth = Authenticator(keys: APIKeyStore(pool: pool))
        let token = try APIKeyToken.generate()
        let r = await auth.authenticate(authorization: "Bearer " + token.text)
        #expect(r == .failure(.unavailable))
        let answer = APIError(AuthError.unavailable)
        #expect(answer.status.code == 503)
        #expect(answer.challenge == nil)
        // Malformed credentials never reach the database.
        #expect(await auth.authenticate(authorization: "Bearer x") == .failure(.malformedCredentials))
        #expect(await auth.authenticate(authorization: nil) == .failure(.missingCredentials))
        await pool.shutdown()
    }
}

enum TestPostgresAuth {
    static func withKeys(_ body: (APIKeyStore) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            try await body(APIKeyStore(pool: db.makePool()))
        }
    }
}
