@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import DQL
import Postgres
import ServerTestSupport
import Store
import SyncProtocol
import Testing
import Values

/// Read rules (docs/AUTH.md, "Rules") through every read path: a caller limited to site A's
/// orders never sees, counts, changes or syncs another site's order.
@Suite struct ReadRulesEndToEndTests {
    static let orders: [Value] = [
        ["_id": "o1", "site": "A", "n": 1], ["_id": "o2", "site": "B", "n": 2],
        ["_id": "o3", "site": "A", "n": 3], ["_id": "o4", "n": 4],
    ]

    /// A server holding `orders` and `parts`, an admin key, and a key limited by `rules`.
    static func withOrders(_ rules: [String], read: CollectionScope = .only(["parts"]),
                           _ configure: @escaping (inout ServerConfiguration) -> Void = { _ in },
                           _ body: (TestServer, _ admin: String, _ limited: String) async throws -> Void) async throws {
        try await withServer(configure) { s in
            let admin = try await s.newKey()
            _ = try await s.rest(key: admin).executeOK("INSERT INTO orders DOCUMENTS (:a), (:b), (:c), (:d)",
                                                       ["a": orders[0], "b": orders[1], "c": orders[2], "d": orders[3]])
            _ = try await s.rest(key: admin).executeOK("INSERT INTO parts DOCUMENTS ({'_id': 'p1'})")
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let limited = try await s.keys.create(description: "site A", expiresAt: expires, read: read, write: .all,
                                                  readRules: try rules.map { try DocumentRule.parse(entry: $0) }).1.text
            try await body(s, admin, limited)
        }
    }

    static func ids(_ reply: RESTReply, _ member: String = "items") -> [Value] {
        guard case .array(let items)? = reply[member] else { return [] }
        return items.compactMap { item in
            guard case .object(let o) = item else { return nil }
            return o["_id"] ?? o["id"]
        }
    }

    static func item(_ reply: RESTReply, _ i: Int) -> Value? {
        guard case .array(let items)? = reply["items"], i < items.count else { return nil }
        return items[i]
    }

    @Test func execute_selectCountUpdateDeleteEvictExplain_seeOnlyWhatTheRuleShows() async throws {
        try await Self.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let rest = s.rest(key: key)
            #expect(Self.ids(try await rest.execute("SELECT * FROM orders ORDER BY _id")) == ["o1", "o3"])
            // The rule applies before OFFSET and LIMIT (o3 is the second visible order, not o2).
            #expect(Self.ids(try await rest.execute("SELECT * FROM orders ORDER BY _id LIMIT 1 OFFSET 1")) == ["o3"])
            #expect(try await rest.execute("SELECT COUNT(*) AS n FROM orders")["items"] == [["n": 2]])
            #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE site = 'B'")).isEmpty)
            // A collection without a rule is whole; the key's scope grew by the rule's collection.
            #expect(Self.ids(try await rest.execute("SELECT * FROM parts")) == ["p1"])
            #expect(try await rest.execute("SELECT * FROM people").status == 403)

            // Writes choose among visible documents only.
            let u = try await rest.execute("UPDATE orders SET n = 9")
            #expect(u["mutatedDocumentIds"] == ["o1", "o3"])
            #expect(try await rest.execute("DELETE FROM orders WHERE _id = 'o2'")["mutatedDocumentIds"] == [])
            #expect(try await rest.execute("EVICT FROM orders WHERE _id = 'o4'")["mutatedDocumentIds"] == [])
            let all = try await s.rest(key: admin).execute("SELECT * FROM orders ORDER BY _id")
            #expect(Self.ids(all) == ["o1", "o2", "o3", "o4"])
            #expect(Self.item(all, 1) == ["_id": "o2", "site": "B", "n": 2])

            let plan = try await rest.execute("EXPLAIN SELECT * FROM orders WHERE n > 0")
            guard case .string(let text)? = Self.item(plan, 0)?["plan"] else { Issue.record("no plan: \(plan)"); return }
            #expect(text.contains("site = 'A'"), "\(text)")
        }
    }

    @Test func pointReads_hiddenDocumentsAre404_evenWhenTheReadCacheHoldsThem() async throws {
        try await Self.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let rest = s.rest(key: key), adminRest = s.rest(key: admin)
            #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE _id = :id", ["id": "o2"])).isEmpty)
            // The admin's reads put o2 in the read cache (once the change feed has enabled it).
            let cached = DocumentReadCache.Key(collection: "orders", id: "o2")
            #expect(try await eventually {
                _ = try await adminRest.executeOK("SELECT * FROM orders WHERE _id = :id", ["id": "o2"])
                return s.service.store.readCache.lookup(cached) != nil
            })
            for _ in 0..<2 {
                #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE _id = :id", ["id": "o2"])).isEmpty)
                #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE _id = 'o2'")).isEmpty)
                #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE _id = :id", ["id": "o1"])) == ["o1"])
            }
            #expect(s.service.store.readCache.lookup(DocumentReadCache.Key(collection: "orders", id: "o1")) != nil)
            // A document that stops matching is gone from the key's point reads at once, cached or not.
            _ = try await adminRest.executeOK("UPDATE orders SET site = 'B' WHERE _id = 'o1'")
            #expect(Self.ids(try await rest.execute("SELECT * FROM orders WHERE _id = :id", ["id": "o1"])).isEmpty)
            let byID = try await s.post("/api/v4/store/findbyid", ["collection": "orders", "id": "o2"], key: key)
            #expect(byID.status == 404)
            #expect(try await s.post("/api/v4/store/findbyid", ["collection": "orders", "id": "o3"], key: key).status == 200)
        }
    }

    @Test func legacyEndpoints_findCountFindByIDAndWrite_seeOnlyWhatTheRuleShows() async throws {
        try await Self.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let find = try await s.post("/api/v4/store/find", ["collection": "orders", "query": "n > 0", "sort": [["property": "_id"]]], key: key)
            #expect(Self.ids(find, "documents") == ["o1", "o3"])
            let limited = try await s.post("/api/v4/store/find", ["collection": "orders", "limit": 1, "offset": 1, "sort": [["property": "_id"]]], key: key)
            #expect(Self.ids(limited, "documents") == ["o3"])
            #expect(try await s.post("/api/v4/store/count", ["collection": "orders"], key: key)["count"] == 2)
            #expect(try await s.post("/api/v4/store/count", ["collection": "orders", "query": "site == 'B'"], key: key)["count"] == 0)
            let write = try await s.post("/api/v4/store/write", ["commands": [
                ["method": "remove", "collection": "orders", "query": "true"],
            ]], key: key)
            #expect(write.status == 200, "\(write)")
            #expect(Self.ids(try await s.rest(key: admin).execute("SELECT * FROM orders ORDER BY _id")) == ["o2", "o4"])
        }
    }

    @Test func legacyFormRule_andSeveralRulesAreORed() async throws {
        try await Self.withOrders(["orders: site == 'B'", "orders: n >= 4"]) { s, _, key in
            #expect(Self.ids(try await s.rest(key: key).execute("SELECT * FROM orders ORDER BY _id")) == ["o2", "o4"])
            let keys = try await s.keys.list()
            #expect(keys.contains { $0.readRules.description == "orders: site == 'B'; orders: n >= 4" })
        }
    }

    @Test func keysCreateAndList_fromTheCommandLine() async throws {
        let exe = try ServerProcess.locateBinary()
        try await Self.withOrders([]) { s, _, _ in
            let db = ["--database-url", conninfo(s.database.configuration)]
            let created = try await TestCommand.run(exe, ["keys", "create", "--description", "site A", "--expires-in", "1d",
                                                          "--read", "orders: site = 'A'", "--read", "orders: n >= 4", "--read", "parts"] + db)
            #expect(created.status == 0, "\(created.err)")
            #expect(created.out.contains("read rules:  orders: site = 'A'; orders: n >= 4"), "\(created.out)")
            let key = String(try #require(created.out.split(separator: "\n").last))
            #expect(Self.ids(try await s.rest(key: key).execute("SELECT * FROM orders ORDER BY _id")) == ["o1", "o3", "o4"])
            #expect(Self.ids(try await s.rest(key: key).execute("SELECT * FROM parts")) == ["p1"])
            let listed = try await TestCommand.run(exe, ["keys", "list"] + db)
            #expect(listed.out.contains("READ RULES"))
            #expect(listed.out.contains("orders: site = 'A'; orders: n >= 4"))
            for bad in [["--read", "orders: length(site) > 1"], ["--read", "orders: site = :claims.site"], ["--read", "orders:"],
                        ["--write", "orders: length(site) > 1"], ["--write-all", "--write", "orders"]] {
                let r = try await TestCommand.run(exe, ["keys", "create", "--description", "x", "--expires-in", "1d"] + bad + db)
                #expect(r.status != 0, "\(bad)")
            }
        }
    }

    @Test func keyRulesNamingClaims_areRefusedAtCreation() async throws {
        try await withServer { s in
            let rule = try DocumentRule.parse(entry: "orders: site = :claims.site")
            await #expect(throws: APIKeyStoreError.self) {
                _ = try await s.keys.create(description: "x", expiresAt: APIKeyStore.now(), read: .none, write: .none, readRules: [rule])
            }
        }
    }
}
