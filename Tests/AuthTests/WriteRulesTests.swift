@testable import Auth
import BigPeerServer
import BigPeerTestSupport
import CRDT
import DQL
import HTTP
import Postgres
import ServerTestSupport
import SyncProtocol
import Testing
import Values

/// Write rules (docs/AUTH.md, "Write rules") through every write path: a caller limited to site A's
/// orders cannot create, change, delete or upload an order outside site A, nor move one out of it.
@Suite struct WriteRulesTests {
    typealias Orders = ReadRulesEndToEndTests

    /// `withOrders` with a key that reads everything and writes `orders` under `rules`.
    static func withWriteRules(_ rules: [String], _ configure: @escaping (inout ServerConfiguration) -> Void = { _ in },
                               _ body: (TestServer, _ admin: String, _ limited: String) async throws -> Void) async throws {
        try await Orders.withOrders([], configure) { s, admin, _ in
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let limited = try await s.keys.create(description: "writes site A", expiresAt: expires, read: .all, write: .none,
                                                  writeRules: try rules.map { try DocumentRule.parse(entry: $0) }).1.text
            try await body(s, admin, limited)
        }
    }

    static func all(_ s: TestServer, _ admin: String) async throws -> RESTReply {
        try await s.rest(key: admin).execute("SELECT * FROM orders ORDER BY _id")
    }

    static func refused(_ reply: RESTReply, sourceLocation: Testing.SourceLocation = #_sourceLocation) {
        #expect(reply.status == 403, "\(reply.body)", sourceLocation: sourceLocation)
        #expect("\(reply.body)".contains("write rules of collection orders"), "\(reply.body)", sourceLocation: sourceLocation)
    }

    @Test func execute_insertUpdateDeleteEvict_stayInsideTheRule_andARefusalWritesNothing() async throws {
        try await Self.withWriteRules(["orders: site = 'A'"]) { s, admin, key in
            let rest = s.rest(key: key)
            #expect(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'n1', 'site': 'A'})")["mutatedDocumentIds"] == ["n1"])
            // A document outside the rule, alone or among good ones: the statement fails whole.
            let outside = try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'n2', 'site': 'B', 'secret': 'xyzzy'})")
            Self.refused(outside)
            #expect(!"\(outside.body)".contains("xyzzy"), "the message shows no document content")
            Self.refused(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'n3', 'site': 'A'}), ({'_id': 'n4'})"))
            // An update that moves a matching document out of the rule.
            Self.refused(try await rest.execute("UPDATE orders SET site = 'B' WHERE _id = 'o1'"))
            Self.refused(try await rest.execute("UPDATE orders SET site = 'C'"))
            // Upsert over a document that does not match before (o2 is site B), even making it match.
            Self.refused(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o2', 'site': 'A'}) ON ID CONFLICT DO UPDATE"))
            #expect(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'o1', 'n': 10}) ON ID CONFLICT DO UPDATE").status == 200)
            // UPDATE, DELETE and EVICT choose only among documents the rule allows.
            let updated = try await rest.execute("UPDATE orders SET n = 5 WHERE _id != 'o1'")["mutatedDocumentIds"]
            #expect(Set((updated?.arrayValue ?? []).compactMap(ReadRulesSyncTests.string)) == ["o3", "n1"], "\(String(describing: updated))")
            #expect(try await rest.execute("DELETE FROM orders WHERE _id = 'o2'")["mutatedDocumentIds"] == [])
            #expect(try await rest.execute("EVICT FROM orders WHERE _id = 'o4'")["mutatedDocumentIds"] == [])
            #expect(try await rest.execute("DELETE FROM orders WHERE _id = 'n1'")["mutatedDocumentIds"] == ["n1"])
            let all = try await Self.all(s, admin)
            #expect(Orders.ids(all) == ["o1", "o2", "o3", "o4"])
            #expect(Orders.item(all, 0) == ["_id": "o1", "site": "A", "n": 10])
            #expect(Orders.item(all, 1) == ["_id": "o2", "site": "B", "n": 2])
            #expect(Orders.item(all, 2) == ["_id": "o3", "site": "A", "n": 5])
            #expect(Orders.item(all, 3) == ["_id": "o4", "n": 4])
            // Reads are not narrowed by write rules (read and write are independent).
            #expect(Orders.ids(try await rest.execute("SELECT * FROM orders ORDER BY _id")) == ["o1", "o2", "o3", "o4"])
        }
    }

    @Test func bulkInsert_withOneDocumentOutsideInALaterChunk_writesNothing() async throws {
        try await Self.withWriteRules(["orders: site = 'A'"]) { s, admin, key in
            // Past `InsertMerge.chunk` (1,000): streamed in chunks, the bad one in the third.
            var args: [String: Value] = [:]
            for i in 0..<2500 { args["d\(i)"] = ["_id": .string("b\(i)"), "site": "A"] }
            let statement = "INSERT INTO orders DOCUMENTS " + (0..<2500).map { "(:d\($0))" }.joined(separator: ", ")
            args["d2200"] = ["_id": "b2200", "site": "B"]
            for conflict in ["", " ON ID CONFLICT DO UPDATE"] {
                Self.refused(try await s.rest(key: key).execute(statement + conflict, args))
                #expect(Orders.ids(try await Self.all(s, admin)) == ["o1", "o2", "o3", "o4"], "\(conflict)")
            }
            args["d2200"] = ["_id": "b2200", "site": "A"]
            #expect(try await s.rest(key: key).execute(statement, args).status == 200)
        }
    }

    @Test func legacyWrite_upsertUpdateRemove_stayInsideTheRule() async throws {
        try await Self.withWriteRules(["orders: site == 'A'"]) { s, admin, key in
            func write(_ command: Value) async throws -> RESTReply {
                try await s.post("/api/v4/store/write", ["commands": [command]], key: key)
            }
            #expect(try await write(["method": "upsert", "collection": "orders", "value": ["_id": "l1", "site": "A"]]).status == 200)
            Self.refused(try await write(["method": "upsert", "collection": "orders", "value": ["_id": "l2", "site": "B"]]))
            Self.refused(try await write(["method": "upsert", "collection": "orders", "value": ["_id": "o2", "n": 7]]))
            Self.refused(try await write(["method": "update", "collection": "orders", "query": "_id == 'o1'",
                                          "updates": [["method": "set", "path": "site", "value": "B"]]]))
            #expect(try await write(["method": "remove", "collection": "orders", "query": "true"]).status == 200)
            let all = try await Self.all(s, admin)
            #expect(Orders.ids(all) == ["o2", "o4"])
            #expect(Orders.item(all, 0) == ["_id": "o2", "site": "B", "n": 2])
        }
    }

    @Test func syncUpload_oneEntryOutsideTheRule_isRejectedWithItsReason_theRestCommit() async throws {
        try await Self.withWriteRules(["orders: site = 'A'"]) { s, admin, key in
            let peer = try await ReadRulesSyncTests.connect(s.port, site: 0xD1, .apiKey(key))
            var replica = Replica(site: SiteID(0xD1))
            func entry(_ id: String, _ fields: [String: Value]) throws -> UploadEntry {
                var doc = try Document(id: .string(id))
                let before = doc.versionVector
                _ = try doc.upsert(fields.merging(["_id": .string(id)]) { a, _ in a }, replica: &replica)
                return UploadEntry(document: DocumentRef(collection: "orders", id: .string(id)), delta: doc.delta(since: before).encode())
            }
            peer.send(.upload(seq: 1, entries: [
                try entry("u1", ["site": "A"]),   // created inside: committed
                try entry("u2", ["site": "B"]),   // created outside
                try entry("o1", ["site": "B"]),   // moves o1 (site A) out
                try entry("o2", ["site": "A"]),   // o2 (site B) did not match before
                try entry("u3", ["site": "A", "n": 3]),
            ]))
            let acked = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            guard case .ack(1, _, let rejected)? = acked.last else { Issue.record("no ack: \(acked)"); return }
            #expect(rejected.map(\.index) == [1, 2, 3])
            #expect(rejected.allSatisfy { $0.message == "not permitted by the write rules of collection orders" }, "\(rejected)")
            let all = try await Self.all(s, admin)
            #expect(Orders.ids(all) == ["o1", "o2", "o3", "o4", "u1", "u3"])
            #expect(Orders.item(all, 0)?["site"] == "A" && Orders.item(all, 1)?["site"] == "B")
        }
    }

    /// An entry allowed only because an earlier entry of the same upload (refused) moved the
    /// document into the rule is refused too: the upload is checked again without the refused one.
    @Test func syncUpload_anEntryThatOnlyMatchedAfterARefusedOne_isRefusedToo() async throws {
        try await Self.withWriteRules(["orders: site = 'A'"]) { s, admin, key in
            let peer = try await ReadRulesSyncTests.connect(s.port, site: 0xD3, .apiKey(key))
            func entry(site: UInt64, _ fields: [String: Value]) throws -> UploadEntry {
                var replica = Replica(site: SiteID(site))
                var doc = try Document(id: "o2")
                let before = doc.versionVector
                _ = try doc.upsert(fields, replica: &replica)
                return UploadEntry(document: DocumentRef(collection: "orders", id: "o2"), delta: doc.delta(since: before).encode())
            }
            // o2 is site B: the first entry moves it to A (refused: not A before); the second,
            // another site's change of another field, passes only after the first.
            peer.send(.upload(seq: 1, entries: [try entry(site: 0xD3, ["_id": "o2", "site": "A"]), try entry(site: 0xD4, ["_id": "o2", "x": 1])]))
            let acked = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            guard case .ack(1, _, let rejected)? = acked.last else { Issue.record("no ack: \(acked)"); return }
            #expect(rejected.map(\.index) == [0, 1], "\(rejected)")
            #expect(Orders.item(try await Self.all(s, admin), 1) == ["_id": "o2", "site": "B", "n": 2])
        }
    }

    @Test func jwtWriteRules_resolveClaims_onREST() async throws {
        let secret = ReadRulesSyncTests.secret
        try await Orders.withOrders([], { $0.jwt = try? JWTVerifier(secret: secret) }) { s, admin, _ in
            let jwt = try JWTVerifier(secret: secret)
            let exp = Value.int(JWTVerifier.wallClockSeconds() + 3600)
            let token = jwt.sign(claims: ["sub": "tablet-1", "exp": exp, "site": "B", "permissions": [
                "read": ["everything": true], "write": ["queriesByCollection": ["orders": ["site = :claims.site"]]]]])
            let rest = s.rest(key: token)
            #expect(try await rest.execute("UPDATE orders SET n = 20")["mutatedDocumentIds"] == ["o2"])
            Self.refused(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'j1', 'site': 'A'})"))
            #expect(try await rest.execute("INSERT INTO orders DOCUMENTS ({'_id': 'j2', 'site': 'B'})").status == 200)
            #expect(Orders.ids(try await Self.all(s, admin)) == ["j2", "o1", "o2", "o3", "o4"])
        }
    }

    @Test func webhookWriteRules_resolveTheUsersMetadata_onREST() async throws {
        let answer: Value = ["authenticated": true, "userID": "tech-9", "expirationSeconds": 600, "identityServiceMetadata": ["site": "A"],
                             "permissions": ["read": ["everything": true],
                                             "write": ["queriesByCollection": ["orders": ["site = :claims.identityServiceMetadata.site"]]]]]
        try await WebhookTestServer.with({ _, _ in .json(answer) }) { webhook in
            try await Orders.withOrders([], { $0.authWebhook = AuthWebhook.Configuration(providers: ["corp": webhook.url("/auth")]) }) { s, admin, _ in
                func run(_ statement: String) async throws -> RESTReply {
                    var h = JWTEndToEndTests.bearer("opaque-token")
                    h.add("X-Auth-Provider", "corp")
                    return try await s.rest().execute(statement, headers: h)
                }
                #expect(try await run("UPDATE orders SET n = 30")["mutatedDocumentIds"]?.arrayValue?.count == 2)
                Self.refused(try await run("INSERT INTO orders DOCUMENTS ({'_id': 'w1', 'site': 'B'})"))
                Self.refused(try await run("UPDATE orders SET site = 'B' WHERE _id = 'o3'"))
                #expect(try await run("INSERT INTO orders DOCUMENTS ({'_id': 'w2', 'site': 'A'})").status == 200)
                let all = try await Self.all(s, admin)
                #expect(Orders.ids(all) == ["o1", "o2", "o3", "o4", "w2"])
                #expect(Orders.item(all, 1)?["n"] == 2 && Orders.item(all, 2)?["site"] == "A")
            }
        }
    }

    @Test func keysCreateWithWriteRules_fromTheCommandLine() async throws {
        let exe = try ServerProcess.locateBinary()
        try await Orders.withOrders([]) { s, admin, _ in
            let db = ["--database-url", conninfo(s.database.configuration)]
            let created = try await TestCommand.run(exe, ["keys", "create", "--description", "tablet", "--expires-in", "1d", "--read-all",
                                                          "--write", "orders: site = 'A'", "--write", "parts"] + db)
            #expect(created.status == 0, "\(created.err)")
            #expect(created.out.contains("write rules: orders: site = 'A'"), "\(created.out)")
            let key = String(try #require(created.out.split(separator: "\n").last))
            Self.refused(try await s.rest(key: key).execute("INSERT INTO orders DOCUMENTS ({'_id': 'k1', 'site': 'B'})"))
            #expect(try await s.rest(key: key).execute("INSERT INTO parts DOCUMENTS ({'_id': 'p2', 'site': 'B'})").status == 200)
            #expect(Orders.ids(try await Self.all(s, admin)) == ["o1", "o2", "o3", "o4"])
            let listed = try await TestCommand.run(exe, ["keys", "list"] + db)
            #expect(listed.out.contains("WRITE RULES") && listed.out.contains("orders: site = 'A'"), "\(listed.out)")
        }
    }
}
