import Auth
@testable import BigPeerServer
import BigPeerTestSupport
import CRDT
import DQL
import Logging
import Postgres
import ServerTestSupport
import Store
import Sync
import Sockets
import SyncProtocol
import Testing
import Values

/// Write-rule refusals in the audit log (docs/AUTH.md, "Audit log"): a REST write's 403 line and a
/// sync upload's line name the credential, the collection, the documents, the operation and the
/// rule; a large refused upload costs one line, not one per document.
@Suite struct WriteRuleAuditTests {
    typealias Endpoint = AbuseLimitsEndpointTests

    /// A key that may write only red cars.
    static func redCarsKey(_ server: InProcessServer) async throws -> (key: String, id: String) {
        let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
        let key = try await server.keys.create(description: "red cars", expiresAt: expires, read: .all, write: .none,
                                               writeRules: [try DocumentRule.parse(entry: "cars: color = 'red'")]).1.text
        return (key, try #require(APIKeyToken(parsing: key)).id)
    }

    @Test func restWriteRefused_theLineNamesTheDocumentOperationAndRule() async throws {
        try await Endpoint.withServer({ _ in }) { h in
            let (key, id) = try await Self.redCarsKey(h.server)
            let refused = try await h.rest(key).execute("INSERT INTO cars DOCUMENTS ({_id: 'b\n1', color: 'blue'}), ({_id: 'r', color: 'red'})")
            #expect(refused.status == 403)
            #expect(try await h.rest(key).execute("INSERT INTO cars DOCUMENTS ({_id: 'r', color: 'red'})").status == 200)
            let lines = h.auditLines.filter { $0.contains("what=POST /api/v4/store/execute") }
            #expect(lines.count == 1, "\(lines)")
            let line = try #require(lines.first)
            for part in ["decision=denied", "who=\(id)", "collection=cars", "operation=insert", "refused=1",
                         #"documents="b\n1""#, "rule=color = 'red'", "why=403 not permitted by the write rules of collection cars"] {
                #expect(line.contains(part), "\(part) in \(line)")
            }
            #expect(!refused.text.contains("color = 'red'"), "the rule is for the operator, not the client")
            // The legacy write route: an UPDATE that would make a red car blue.
            let update: Value = ["method": "update", "collection": "cars", "query": "_id == 'r'", "updates": [["method": "set", "path": "color", "value": "blue"]]]
            #expect(try await h.rest(key).post("/api/v4/store/write", ["commands": [update]]).status == 403)
            let legacy = h.auditLines.filter { $0.contains("what=POST /api/v4/store/write") }
            #expect(legacy.count == 1 && legacy.first?.contains(#"documents="r" operation=update refused=1"#) == true, "\(legacy)")
        }
    }

    @Test func syncUploadRefused_oneLinePerUploadWithACountAndTheFirstIDs() async throws {
        try await Endpoint.withServer({ _ in }) { h in
            let (key, id) = try await Self.redCarsKey(h.server)
            let peer = try await SyncTestClient(port: h.server.port, loop: Endpoint.loops.next())
            peer.send(Endpoint.hello(site: 0xC1, .apiKey(key)))
            guard case .welcome = try await peer.nextMessage() else { Issue.record("not welcomed"); return }
            var replica = Replica(site: SiteID(0xC1))
            var entries: [UploadEntry] = []
            for n in 0..<200 {
                let docID = Value.string("car\(n)")
                var doc = try Document(id: docID)
                let before = doc.versionVector
                _ = try doc.upsert(["_id": docID, "color": n == 0 ? "red" : "blue"], replica: &replica)
                entries.append(UploadEntry(document: DocumentRef(collection: "cars", id: docID), delta: doc.delta(since: before).encode()))
            }
            peer.send(.upload(seq: 1, entries: entries))
            let acks = try await peer.waitFor { if case .ack = $0 { true } else { false } }
            guard case .ack(1, _, let rejected)? = acks.last else { Issue.record("\(acks)"); return }
            #expect(rejected.count == 199)
            let lines = h.auditLines.filter { $0.contains("what=sync upload") }
            #expect(lines.count == 1, "one line for the upload, not one per document: \(lines)")
            let line = try #require(lines.first)
            for part in ["decision=denied", "who=\(id)", "collection=cars", "operation=upload", "refused=199", "link=WebSocket",
                         #"documents="car1","car2","car3","car4","car5" "#, "rule=color = 'red'"] {
                #expect(line.contains(part), "\(part) in \(line)")
            }
        }
    }

    /// However many collections an upload's refusals span, it costs at most four lines; other
    /// rejections (a malformed delta) are no auth decision and are not audited.
    @Test func anUploadRefusedInManyCollections_costsAtMostFourLines() {
        let lines = MutexBox<[String]>([])
        let audit = AuthAudit(logger: Logger(label: AuthAudit.label) { _ in AuditRecorder(lines: lines) }, mode: .denials)
        let abuse = AbuseGuard(limiter: AbuseLimiter(AbuseLimits()), audit: audit, logger: Logger(label: "test"))
        var rules = DocumentRules()
        var entries: [UploadEntry] = [], rejected: [UploadRejection] = []
        for c in 0..<6 {
            rules.add(collection: "c\(c)", text: "owner = 'me'", condition: .literal(.bool(false)))
            for d in 0..<3 {
                rejected.append(UploadRejection(index: entries.count, message: DocumentStore.writeRuleRejection("c\(c)")))
                entries.append(UploadEntry(document: DocumentRef(collection: "c\(c)", id: .string("d\(d)")), delta: []))
            }
        }
        rejected.append(UploadRejection(index: entries.count, message: "the delta is not valid CBOR"))
        entries.append(UploadEntry(document: DocumentRef(collection: "c9", id: "bad"), delta: []))
        let permissions = SyncPermissions(read: .all, write: .all, principal: "k1", writeRules: rules)
        abuse.auditUploadRefusals(permissions, entries: entries, rejected: rejected, remote: "10.0.0.1:5", link: .accessPoint)
        let logged = lines.withLock { $0 }
        #expect(logged.count == AbuseGuard.maxUploadAuditLines, "\(logged)")
        #expect(logged.first?.contains(#"collection=c0 decision=denied documents="d0","d1","d2" link=AccessPoint operation=upload refused=3 rule=owner = 'me'"#) == true,
                "\(logged)")
        #expect(logged.last?.contains("collection=c3") == true && logged.last?.contains("other_collections=2") == true, "\(logged)")
        #expect(!logged.contains { $0.contains("c9") })
    }
}
