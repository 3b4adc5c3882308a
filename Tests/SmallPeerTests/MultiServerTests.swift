// A small peer with sync links to several servers (docs/SMALLPEER.md "Several servers"): its
// checkpoints and upload state are per server. One peer between two BigPeer servers (a write
// reaches both, a change crosses the peer, a checkpoint of one is never sent to the other), a chain
// whose middle peer is the client of both ends, the per-server state in the commit records, and a
// directory written before per-server state.
import BigPeerTestSupport
import CRDT
import Foundation
@testable import SmallPeer
import SyncPeer
import SyncProtocol
import Synchronization
import Testing
import Values

@Suite struct MultiServerTests {
    static let all = "SELECT * FROM cars"

    static func ids(_ server: TestServer) async throws -> [Value] {
        try await server.items("SELECT _id FROM cars ORDER BY _id").compactMap { $0["_id"] }
    }

    static func serverHas(_ server: TestServer, _ id: String) async -> Bool {
        (try? await ids(server).contains(.string(id))) == true
    }

    /// Two servers, each on its own database.
    static func withTwoServers(_ body: (TestServer, TestServer) async throws -> Void) async throws {
        try await TestServer.with { a in
            try await TestPostgres.withDatabase { db in
                let b = try await TestServer.start(db)
                try await afterwards({ await b.stop() }) { try await body(a, b) }
            }
        }
    }

    @Test func onePeerTwoServers_aWriteReachesBoth_andAChangeCrossesThePeer() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await Self.withTwoServers { serverA, serverB in
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            let toA = try serverA.client(peer), toB = try serverB.client(peer)
            try await toA.waitUntilCaughtUp(timeout: .seconds(30))
            try await toB.waitUntilCaughtUp(timeout: .seconds(30))
            #expect(peer.linkedServers.count == 2)

            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'local', 'n': 1})")
            #expect(try await eventually(within: .seconds(30)) {
                let onA = await Self.serverHas(serverA, "local"), onB = await Self.serverHas(serverB, "local")
                return onA && onB
            },
                    "a local write reaches both servers")
            try await serverA.execute("INSERT INTO cars DOCUMENTS ({'_id': 'onA', 'n': 2})")
            #expect(try await eventually(within: .seconds(30)) { await Self.serverHas(serverB, "onA") }, "A's change reaches B through the peer")
            try await serverB.execute("INSERT INTO cars DOCUMENTS ({'_id': 'onB', 'n': 3})")
            #expect(try await eventually(within: .seconds(30)) { await Self.serverHas(serverA, "onB") }, "B's change reaches A through the peer")
            #expect(try await eventually(within: .seconds(30)) { peer.pendingUploadCount == 0 })
            #expect(try await Self.ids(serverA) == Self.ids(serverB))
            await toA.stop()
            await toB.stop()
        }
    }

    /// B's early document was committed before A's documents and B's later ones after them: its
    /// transaction number is below A's checkpoint, which lies inside B's log, so a session with B
    /// resumed at A's checkpoint would send the later ones and never the early one.
    @Test func theFirstSessionWithAServer_doesNotSendAnotherServersCheckpoint() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await Self.withTwoServers { serverA, serverB in
            try await serverB.execute("INSERT INTO cars DOCUMENTS ({'_id': 'early', 'n': 0})")
            for i in 0..<5 { try await serverA.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a\(i)', 'n': \(i)})") }
            for i in 0..<10 { try await serverB.execute("INSERT INTO cars DOCUMENTS ({'_id': 'late\(i)', 'n': \(i)})") }
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            try await serverA.syncOnce(peer)
            let siteA = try #require(peer.linkedServers.first)
            let sub = peer.subscriptions[0]
            #expect(peer.checkpoint(for: sub, server: siteA) != nil)

            let status = try await serverB.syncOnce(peer)
            let siteB = try #require(peer.linkedServers.subtracting([siteA]).first)
            #expect(peer.resume(for: sub, server: siteB) != nil && peer.checkpoint(for: sub, server: siteA) != nil)
            #expect(try rows(peer, "SELECT _id FROM cars WHERE _id = 'early'").count == 1, "B's early document was downloaded")
            #expect(status.receivedEntries == 11, "all of B's documents")
            // What the peer got from A went on to B (B was new to it: everything it holds).
            #expect(try await eventually(within: .seconds(30)) { await Self.serverHas(serverB, "a4") })
        }
    }

    @Test func chain_theMiddlePeerIsTheClientOfBothEnds_andNothingLoops() async throws {
        let dirs = [TempDirectory(), TempDirectory(), TempDirectory()]
        defer { for d in dirs { d.cleanup() } }
        let (a, b, c) = try PeerServingTests.threePeers(dirs)
        // B dials A and C; A and C only serve.
        let servesA = try await PeerListener.start(a), servesC = try await PeerListener.start(c)
        _ = try b.subscribe(Self.all)
        b.state.withLock { $0.log.keepsRows = true }  // as if B served too: what it logs is counted below
        let bToA = try PeerServingTests.client(b, servesA), bToC = try PeerServingTests.client(b, servesC)
        try await bToA.waitUntilCaughtUp(timeout: .seconds(30))
        try await bToC.waitUntilCaughtUp(timeout: .seconds(30))

        try await PeerServingTests.changesCrossTheMiddlePeer(a, b, c)
        #expect(try await eventually(within: .seconds(30)) { b.pendingUploadCount == 0 })
        #expect([bToA.status.receivedEntries, bToC.status.receivedEntries] == [2, 1] as [Int], "each end's own changes, once each; nothing came back")
        #expect([bToA.status.uploadedDocuments, bToC.status.uploadedDocuments] == [1, 2] as [Int], "C's change to A; A's two to C")
        await PeerServingTests.stop([bToA, bToC], [servesA, servesC])
    }

    @Test func uploadState_perServer_persistsAndSurvivesASnapshot() throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let serverA: UInt64 = 0xA, serverB: UInt64 = 0xB
        let sub = SyncSubscription(query: Self.all, arguments: [:], collection: "cars")
        do {
            let peer = try openPeer(dir.path)
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'before', 'n': 0})")
            try peer.linkServer(serverA)
            #expect(peer.pendingUploadCount(server: serverA) == 1, "the first server takes what was pending for no server")
            _ = try peer.acknowledge(peer.takeUploads(excluding: [], maxDocuments: 10, maxBytes: 1 << 20, server: serverA), rejected: [], server: serverA)
            #expect(peer.pendingUploadCount == 0)
            try peer.saveCheckpoints([(sub.key, 7)], server: serverA)

            try peer.linkServer(serverB)
            #expect(peer.pendingUploadCount(server: serverB) == 1, "a later server gets every document")
            #expect(peer.resume(for: sub, server: serverB) == nil && peer.resume(for: sub, server: serverA)?.checkpoint == 7)
            let fromA = try CRDTFixtures.document("fromA")
            _ = try peer.applyFromServer([ChangeEntry(document: DocumentRef(collection: "cars", id: "fromA"), kind: .upsert, payload: .state(fromA.encode()))],
                                         origin: serverA)
            #expect(peer.pendingUploadCount(server: serverA) == 0 && peer.pendingUploadCount(server: serverB) == 2)
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'local', 'n': 1})")
            #expect(peer.pendingUploadCount(server: serverA) == 1 && peer.pendingUploadCount(server: serverB) == 3)
            _ = try peer.acknowledge(peer.takeUploads(excluding: [], maxDocuments: 10, maxBytes: 1 << 20, server: serverA), rejected: [], server: serverA)
            #expect(peer.pendingUploadCount(server: serverA) == 0 && peer.pendingUploadCount == 3, "A's ack leaves B's state alone")

            // A snapshot holds the same state as the log it replaces.
            let (store, commits) = peer.state.withLock { ($0.store, $0.store.snapshotCommits()) }
            var replayed = LocalStore(site: store.replica.site)
            for commit in commits { try replayed.replay(commit) }
            #expect(replayed.outbox == store.outbox && replayed.linkedServers == store.linkedServers && replayed.checkpoints == store.checkpoints)
            peer.close()
        }
        let reopened = try openPeer(dir.path)
        #expect(reopened.linkedServers == [serverA, serverB])
        #expect(reopened.pendingUploadCount(server: serverA) == 0 && reopened.pendingUploadCount(server: serverB) == 3)
        #expect(reopened.checkpoint(for: sub, server: serverA) == 7 && reopened.checkpoint(for: sub, server: serverB) == nil)
    }

    /// A directory as versions before per-server state wrote it: a commit with a document, its
    /// outbox entry ("o") and a checkpoint of no server ("k"), written here byte by byte.
    @Test func anOldDirectory_opens_andUploadsItsOutboxToTheFirstServer() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let sub = SyncSubscription(query: Self.all, arguments: [:], collection: "cars")
        let site: UInt64 = 0x01D
        let document = try Self.document("old", site: site)
        var w = CBORWriter()
        w.mapHeader(6)
        w.text("c"); w.unsigned(document.versionVector[SiteID(site)]?.rawValue ?? 1)
        w.text("d"); w.arrayHeader(1)
        w.arrayHeader(4); w.text("cars"); w.value(.string("old")); w.unsigned(1); w.byteString(document.encode())
        w.text("k"); w.arrayHeader(1)
        w.arrayHeader(2); w.text(sub.key); w.int(Int64.max / 2)
        w.text("o"); w.arrayHeader(1)
        w.arrayHeader(3); w.text("cars"); w.value(.string("old")); w.arrayHeader(0)
        w.text("s"); w.unsigned(1)
        w.text("t"); w.text("c")
        let log = RecordFraming.frame(PeerRecordCodec.encode(FileHeader(site: site, generation: 0))) + RecordFraming.frame(w.bytes)
        try Data(log).write(to: URL(fileURLWithPath: dir.sub("log")))

        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'onServer', 'n': 0})")
            let peer = try openPeer(dir.path)
            #expect(peer.pendingUploadCount == 1 && peer.linkedServers.isEmpty)
            #expect(peer.checkpoint(for: sub) == nil, "an old checkpoint belongs to no server")
            _ = try peer.subscribe(Self.all)
            try await server.syncOnce(peer)
            #expect(peer.linkedServers.count == 1 && peer.pendingUploadCount == 0)
            #expect(await Self.serverHas(server, "old"), "the old outbox went to the first server")
            #expect(try rows(peer, "SELECT _id FROM cars ORDER BY _id") == [["_id": "old"], ["_id": "onServer"]], "synced from the start")
        }
    }

    /// A document `site` wrote, as a peer's INSERT makes it.
    static func document(_ id: String, site: UInt64) throws -> Document {
        var doc = try Document(id: .string(id))
        var replica = Replica(site: SiteID(site), wallClock: { 1_700_000_000_000 })
        _ = try doc.upsert(["_id": .string(id), "n": .int(1)], replica: &replica)
        return doc
    }
}
