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

/// Attachments under read rules (docs/AUTH.md, "Attachments"): without the attachment scope, an
/// attachment downloads only through a live document that references it and that the caller may
/// read; anything else is the 404 of an attachment that does not exist.
@Suite struct AttachmentReadRulesTests {
    /// Uploads `text` as an attachment (with a key that may write everything) and returns its id.
    static func upload(_ s: TestServer, _ text: String, key: String) async throws -> String {
        let boundary = "b0undary"
        let body = Array("--\(boundary)\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n\(text)\r\n--\(boundary)--\r\n".utf8)
        let h: HTTPHeaders = ["Content-Type": "multipart/form-data; boundary=\(boundary)", "Authorization": "Bearer \(key)"]
        let r = try await s.http.execute(HTTPClientRequest(method: .POST, url: "\(s.base)/api/v4/attachments/upload", headers: h, body: body))
        #expect(r.status.code == 200)
        return try #require(try JSON.parse(r.body)["id"]?.stringValue)
    }

    /// The status of a download, and its body when 200.
    static func fetch(_ s: TestServer, _ id: String, key: String) async throws -> (Int, String) {
        let r = try await AttachmentAuthTests.download(s, id, key: key)
        return (Int(r.status.code), r.status.code == 200 ? String(decoding: r.body, as: UTF8.self) : "")
    }

    static func token(_ id: String, _ text: String) -> Value {
        ["_type": "attachment", "id": .string(id), "len": .int(Int64(text.utf8.count)), "metadata": [:]]
    }

    /// `INSERT` of one document whose `photo` is an attachment token.
    static func insertWithPhoto(_ s: TestServer, admin: String, _ collection: String, _ fields: [String: Value]) async throws {
        _ = try await s.rest(key: admin).executeOK("INSERT INTO COLLECTION \(collection) (photo ATTACHMENT) DOCUMENTS (:d) ON ID CONFLICT DO UPDATE",
                                                   ["d": .object(fields)])
    }

    static func references(_ s: TestServer, _ id: String) async throws -> [String] {
        try await s.service.pool.query("SELECT collection || ':' || (doc_id #>> '{}') FROM bigpeer_attachment_refs WHERE attachment_id = \(id) ORDER BY 1")
            .map { try $0.decode(0, as: String.self) }
    }

    @Test func ruleLimitedKey_downloadsOnlyThroughDocumentsItMayRead() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let (x, y, z) = (try await Self.upload(s, "photo of A", key: admin), try await Self.upload(s, "photo of B", key: admin),
                             try await Self.upload(s, "a part", key: admin))
            let unreferenced = try await Self.upload(s, "nobody's", key: admin)
            try await Self.insertWithPhoto(s, admin: admin, "orders", ["_id": "o1", "site": "A", "photo": Self.token(x, "photo of A")])
            try await Self.insertWithPhoto(s, admin: admin, "orders", ["_id": "o2", "site": "B", "photo": Self.token(y, "photo of B")])
            try await Self.insertWithPhoto(s, admin: admin, "parts", ["_id": "p2", "photo": Self.token(z, "a part")])
            #expect(try await Self.references(s, x) == ["orders:o1"])

            #expect(try await Self.fetch(s, x, key: key) == (200, "photo of A"))
            #expect(try await Self.fetch(s, z, key: key) == (200, "a part"), "parts has no rule: its scope alone decides")
            // Referenced only by a document outside the rule, or by none: as if it did not exist.
            let hidden = try await AttachmentAuthTests.download(s, y, key: key)
            #expect(hidden.status.code == 404)
            #expect(try JSON.parse(hidden.body)["error"]?["description"] == .string("no attachment \(y)"))
            #expect(try await Self.fetch(s, unreferenced, key: key).0 == 404)
            // Shared caches must not keep what is checked per caller; a hidden one's ETag gives no 304.
            #expect(try await AttachmentAuthTests.download(s, x, key: key).headers["Cache-Control"] == "private, max-age=31536000, immutable")
            let revalidate = try await s.http.execute(HTTPClientRequest(method: .GET, url: "\(s.base)/api/v4/attachments/\(y)",
                                                                        headers: ["Authorization": "Bearer \(key)", "If-None-Match": "\"\(y)\""]))
            #expect(revalidate.status.code == 404)
            #expect(try await Self.fetch(s, String(repeating: "0", count: 64), key: key).0 == 404)
            // A key that may read neither orders nor parts.
            let stranger = try await s.newKey(read: .only(["people"]), write: .none)
            #expect(try await Self.fetch(s, x, key: stranger).0 == 404)
            #expect(try await Self.fetch(s, y, key: admin).0 == 200, "a key without rules reads through o2")

            // The document stops matching the rule, matches again, stops referencing, is deleted.
            let rest = s.rest(key: admin)
            _ = try await rest.executeOK("UPDATE orders SET site = 'B' WHERE _id = 'o1'")
            #expect(try await Self.fetch(s, x, key: key).0 == 404)
            _ = try await rest.executeOK("UPDATE orders SET site = 'A' WHERE _id = 'o1'")
            #expect(try await Self.fetch(s, x, key: key).0 == 200)
            _ = try await rest.executeOK("UPDATE orders SET photo = 'gone' WHERE _id = 'o1'")
            #expect(try await Self.references(s, x) == [])
            #expect(try await Self.fetch(s, x, key: key).0 == 404)
            try await Self.insertWithPhoto(s, admin: admin, "orders", ["_id": "o1", "site": "A", "photo": Self.token(x, "photo of A")])
            #expect(try await Self.fetch(s, x, key: key).0 == 200)
            _ = try await rest.executeOK("DELETE FROM orders WHERE _id = 'o1'")
            #expect(try await Self.references(s, x) == [])
            #expect(try await Self.fetch(s, x, key: key).0 == 404)
            _ = try await rest.executeOK("EVICT FROM parts WHERE _id = 'p2'")
            #expect(try await Self.references(s, z) == [])
            #expect(try await Self.fetch(s, z, key: key).0 == 404)
        }
    }

    @Test func attachmentScope_downloadsAnyAttachment_byKeyAndByJWT() async throws {
        let signer = try TestSigningKey(.es256, kid: "ec-a")
        try await JWTEndToEndTests.withJWKSFile([signer]) { s, _ in
            let admin = try await s.newKey()
            let id = try await Self.upload(s, "unreferenced", key: admin)
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let (stored, token) = try await s.keys.create(description: "attachments", expiresAt: expires, read: .none, write: .none,
                                                          readAttachments: true)
            #expect(stored.readAttachments)
            #expect(try await Self.fetch(s, id, key: token.text) == (200, "unreferenced"))
            #expect(try await Self.fetch(s, String(repeating: "0", count: 64), key: token.text).0 == 404)
            // The scope is about attachments only.
            #expect(try await s.rest(key: token.text).execute("SELECT * FROM orders").status == 403)

            var claims = TestSigningKey.claims(ttl: 600, read: .array([]), write: .array([]))
            claims["attachments"] = "read"
            #expect(try await Self.fetch(s, id, key: signer.sign(claims)) == (200, "unreferenced"))
            claims["attachments"] = "write"
            #expect(try await Self.fetch(s, id, key: signer.sign(claims)).0 == 401)
            let plain = signer.sign(TestSigningKey.claims(ttl: 600))
            #expect(try await Self.fetch(s, id, key: plain).0 == 404, "read access to every collection is not the attachment scope")
        }
    }

    @Test func keysCreateReadAttachments_fromTheCommandLine() async throws {
        let exe = try ServerProcess.locateBinary()
        try await withServer { s in
            let admin = try await s.newKey()
            let id = try await Self.upload(s, "for the backup job", key: admin)
            let db = ["--database-url", conninfo(s.database.configuration)]
            let created = try await TestCommand.run(exe, ["keys", "create", "--description", "backups", "--expires-in", "1d", "--read-attachments"] + db)
            #expect(created.status == 0, "\(created.err)")
            #expect(created.out.contains("attachments: any"), "\(created.out)")
            let key = String(try #require(created.out.split(separator: "\n").last))
            #expect(try await Self.fetch(s, id, key: key) == (200, "for the backup job"))
            let listed = try await TestCommand.run(exe, ["keys", "list"] + db)
            let rows = listed.out.split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false) }
            #expect(rows.first?[9] == "ATTACHMENTS")
            #expect(rows.dropFirst().map { $0[9] }.sorted() == ["any", "referenced"], "\(listed.out)")
        }
    }

    @Test func syncUploads_addAndRemoveReferences() async throws {
        try await ReadRulesEndToEndTests.withOrders(["orders: site = 'A'"]) { s, admin, key in
            let id = try await Self.upload(s, "synced photo", key: admin)
            #expect(try await Self.fetch(s, id, key: key).0 == 404)
            let peer = try await ReadRulesSyncTests.connect(s.port, site: 0xA7, .apiKey(admin))
            var replica = Replica(site: SiteID(0xA7))
            var doc = try Document(id: "o9")
            _ = try doc.upsert(["_id": "o9", "site": "A"], replica: &replica)
            _ = try doc.setAttachment("photo", AttachmentToken(id: id, length: 12), replica: &replica)
            let ref = DocumentRef(collection: "orders", id: "o9")
            peer.send(.upload(seq: 1, entries: [UploadEntry(document: ref, delta: doc.delta(since: VersionVector()).encode())]))
            _ = try await peer.waitFor { if case .ack(1, _, []) = $0 { true } else { false } }
            #expect(try await Self.references(s, id) == ["orders:o9"])
            #expect(try await Self.fetch(s, id, key: key) == (200, "synced photo"))

            let before = doc.versionVector
            _ = try doc.upsert(["photo": "replaced"], replica: &replica)
            peer.send(.upload(seq: 2, entries: [UploadEntry(document: ref, delta: doc.delta(since: before).encode())]))
            _ = try await peer.waitFor { if case .ack(2, _, []) = $0 { true } else { false } }
            #expect(try await Self.references(s, id) == [])
            #expect(try await Self.fetch(s, id, key: key).0 == 404)
            peer.close()
        }
    }

    @Test func bulkInsertByCopy_andPlainObjectsOfTheTokenShape_areIndexed() async throws {
        try await withServer { s in
            let admin = try await s.newKey()
            let id = try await Self.upload(s, "bulk", key: admin)
            // Enough documents for the COPY path (`DocumentCopy.minimumRows`); every tenth references it.
            var docs: [Value] = []
            for i in 0..<200 {
                var d: [String: Value] = ["_id": .string("b\(i)"), "n": .int(Int64(i))]
                if i % 10 == 0 { d["nested"] = ["list": .array([Self.token(id, "bulk")])] }
                docs.append(.object(d))
            }
            let statement = "INSERT INTO bulk DOCUMENTS " + docs.indices.map { "(:d\($0))" }.joined(separator: ", ")
            _ = try await s.rest(key: admin).executeOK(statement, Dictionary(uniqueKeysWithValues: docs.enumerated().map { ("d\($0.offset)", $0.element) }))
            #expect(try await Self.references(s, id).count == 20)
            // Not a token shape: no reference (an id that is not 64 hex digits, a string that only looks like one).
            _ = try await s.rest(key: admin).executeOK("INSERT INTO bulk DOCUMENTS ({'_id': 'odd', 'a': {'_type': 'attachment', 'id': 'x'}, 's': :s})",
                                                       ["s": .string("{\"_type\":\"attachment\",\"id\":\"\(id)\"}")])
            #expect(try await Self.references(s, id).count == 20)
        }
    }
}
