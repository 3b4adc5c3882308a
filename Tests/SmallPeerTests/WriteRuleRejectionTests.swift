// A SmallPeer whose key has a write rule (docs/AUTH.md, "Write rules"): the document outside it is
// rejected by the server per entry, dropped from the outbox at once (no retry as the full state)
// and reported with the server's reason; the others are committed.
import Auth
import BigPeerServer
import BigPeerTestSupport
import DQL
import Postgres
import ServerTestSupport
@testable import SmallPeer
import Testing
import Values

@Suite("SmallPeer uploads under write rules", .serialized)
struct WriteRuleRejectionTests {
    @Test func anUploadOutsideTheRule_isReportedAndDropped_theOthersCommit() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + 3_600_000_000)
            let key = try await server.server.keys.create(description: "red cars", expiresAt: expires, read: .all, write: .none,
                                                          writeRules: [try DocumentRule.parse(entry: "cars: color = 'red'")]).1.text
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe("SELECT * FROM cars")
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'r1', 'color': 'red'}), ({'_id': 'b1', 'color': 'blue'})")
            let client = try server.client(peer, key: key)
            #expect(await eventually { peer.pendingUploadCount == 0 }, "every upload is acknowledged or dropped")
            let rejected = client.status.rejectedUploads
            #expect(rejected.count == 1, "\(rejected)")
            #expect(rejected.first?.contains("\"b1\"") == true && rejected.first?.contains("not permitted by the write rules of collection cars") == true,
                    "\(rejected)")
            #expect(try await server.items("SELECT * FROM cars ORDER BY _id") == [["_id": "r1", "color": "red"]])
            await client.stop()
        }
    }
}
