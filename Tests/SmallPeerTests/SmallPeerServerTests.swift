// SmallPeers against a real BigPeer server and PostgreSQL over real WebSockets: offline edits that
// converge, REST <-> peer in both directions, the change that makes a document leave, resume from a
// checkpoint after a restart, and re-sent uploads without duplicates.
import BigPeerServer
import BigPeerTestSupport
import CRDT
@testable import SmallPeer
import Synchronization
import SyncProtocol
import Postgres
import ServerTestSupport
import Testing
import Values

@Suite("SmallPeer against a real server", .serialized)
struct SmallPeerServerTests {
    static let all = "SELECT * FROM cars"

    /// Every document of `collection` as the peer holds it, by _id.
    static func snapshot(_ peer: SmallPeer, _ collection: String = "cars") throws -> [Value] {
        try peer.execute("SELECT * FROM \(collection) ORDER BY _id").items
    }

    @Test func twoPeersOffline_registersMapsCountersDeletesReinserts_converge() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO COLLECTION cars (tags MAP) DOCUMENTS (:a), (:c)",
                                     ["a": ["_id": "a", "color": "red", "tags": ["base": 0]], "c": ["_id": "c", "v": 1]])
            try await server.execute("UPDATE cars APPLY n INCREMENT BY 1 WHERE _id = 'a'")
            let a = try openPeer(dirA.path), b = try openPeer(dirB.path)
            _ = try a.subscribe(Self.all)
            _ = try b.subscribe(Self.all)
            try await server.syncOnce(a)
            try await server.syncOnce(b)
            #expect(try Self.snapshot(a) == Self.snapshot(b))
            #expect(try Self.snapshot(a).count == 2)

            // Offline, concurrently: the same register, different map keys, the same counter,
            // a delete against an update, and a delete followed by a re-insert.
            _ = try a.execute("UPDATE cars SET color = 'green' WHERE _id = 'a'")
            _ = try a.execute("UPDATE COLLECTION cars (tags MAP) SET tags.x = 1 WHERE _id = 'a'")
            _ = try a.execute("UPDATE cars APPLY n INCREMENT BY 2 WHERE _id = 'a'")
            _ = try a.execute("DELETE FROM cars WHERE _id = 'c'")
            _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'd', 'k': 1})")
            _ = try a.execute("DELETE FROM cars WHERE _id = 'd'")
            _ = try a.execute("INSERT INTO cars DOCUMENTS ({'_id': 'd', 'k': 2})")
            _ = try b.execute("UPDATE cars SET color = 'yellow' WHERE _id = 'a'")
            _ = try b.execute("UPDATE COLLECTION cars (tags MAP) SET tags.y = 2 WHERE _id = 'a'")
            _ = try b.execute("UPDATE cars APPLY n INCREMENT BY 3 WHERE _id = 'a'")
            _ = try b.execute("UPDATE cars SET v = 2 WHERE _id = 'c'")
            _ = try b.execute("INSERT INTO cars DOCUMENTS ({'_id': 'e', 'k': 5})")

            try await server.syncOnce(a)
            try await server.syncOnce(b)
            try await server.syncOnce(a)
            let va = try Self.snapshot(a), vb = try Self.snapshot(b)
            #expect(va == vb)
            let rest = try await server.items("SELECT * FROM cars ORDER BY _id")
            #expect(rest == va)
            let car = try #require(va.first { $0["_id"] == "a" })
            #expect(car["n"]?.doubleValue == 6)  // 1 + 2 + 3: concurrent increments add up
            #expect(car["tags"] == ["base": 0, "x": 1, "y": 2])  // different map keys both survive
            #expect(["green", "yellow"].contains(car["color"]))
            #expect(va.first { $0["_id"] == "d" }?["k"] == 2)  // re-inserted after the delete
            #expect(va.contains { $0["_id"] == "e" })
            #expect(a.pendingUploadCount == 0 && b.pendingUploadCount == 0)
        }
    }

    @Test func restWriteReachesALivePeer_andAPeerWriteIsVisibleThroughREST() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            let seen = MutexBox<[ObserverEvent]>([])
            let observer = try peer.registerObserver("SELECT * FROM cars WHERE color = 'red'") { e in seen.withLock { $0.append(e) } }
            defer { observer.cancel() }
            let client = try server.client(peer)
            try await client.waitUntilCaughtUp(timeout: .seconds(20))

            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'r1', 'color': 'red'})")
            #expect(await eventually {
                seen.withLock { $0.contains { $0.insertions == ["r1"] } }
            }, "the REST insert reaches the peer's observer")
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'p1', 'color': 'red', 'from': 'peer'})")
            #expect(try await eventually {
                try await server.items("SELECT * FROM cars WHERE _id = 'p1'") == [["_id": "p1", "color": "red", "from": "peer"]]
            }, "the peer's insert is visible through REST")
            #expect(await eventually { peer.pendingUploadCount == 0 }, "the upload is acknowledged")
            await client.stop()
        }
    }

    @Test func redCarTurnedBlue_deliversThatChange_andNothingAfter() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car', 'color': 'red'}), ({'_id': 'other', 'color': 'blue'})")
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe("SELECT * FROM cars WHERE color = 'red'")
            let client = try server.client(peer)
            try await client.waitUntilCaughtUp(timeout: .seconds(20))
            #expect(try Self.snapshot(peer) == [["_id": "car", "color": "red"]])

            try await server.execute("UPDATE cars SET color = 'blue' WHERE _id = 'car'")
            try await server.execute("UPDATE cars SET seats = 7 WHERE _id = 'car'")
            try await server.execute("UPDATE cars SET seats = 2 WHERE _id = 'other'")
            // A later red car is the marker: changes arrive in commit order.
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'marker', 'color': 'red'})")
            #expect(try await eventually { try peer.execute("SELECT * FROM cars WHERE _id = 'marker'").items.count == 1 }, "the marker arrives")
            // The leaving document comes as its state when the server read the change: with the
            // change that made it leave, and possibly later ones committed before that read.
            let car = try peer.execute("SELECT * FROM cars WHERE _id = 'car'").items
            #expect(car == [["_id": "car", "color": "blue"]] || car == [["_id": "car", "color": "blue", "seats": 7]])
            #expect(try peer.execute("SELECT * FROM cars WHERE _id = 'other'").items.isEmpty)
            await client.stop()
        }
    }

    /// Issue #16 item 13: a held document updated by one peer, then deleted over REST while this
    /// peer was away. On resume both rows carry the current value (deleted), so the update looked
    /// like the change that made it leave: its delta went out, and the delete was skipped as no
    /// longer held. The peer kept `x` with `v = 2` for good; now it gets the tombstone.
    @Test func heldDocumentUpdatedThenDeletedWhileAway_isDeletedOnResume() async throws {
        let dirA = TempDirectory(), dirB = TempDirectory()
        defer { dirA.cleanup(); dirB.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'x', 'v': 1})")
            let a = try openPeer(dirA.path), b = try openPeer(dirB.path)
            _ = try a.subscribe(Self.all)
            _ = try b.subscribe(Self.all)
            try await server.syncOnce(a)
            try await server.syncOnce(b)
            _ = try b.execute("UPDATE cars SET v = 2 WHERE _id = 'x'")
            try await server.syncOnce(b)
            try await server.execute("DELETE FROM cars WHERE _id = 'x'")
            try await server.syncOnce(a)
            #expect(try await server.items("SELECT * FROM cars").isEmpty)
            #expect(try Self.snapshot(a).isEmpty)
            a.close()
            b.close()
        }
    }

    /// Issue #16 item 13: an INITIAL insert, made offline, over a server tombstone this peer never
    /// received (an initial sync sends live documents). The server keeps the document deleted
    /// (stamp 0 is under the tombstone's barrier); the peer listed its copy in `have` and never
    /// got its own upload back, so it kept the document alive.
    @Test func initialInsertOverATombstoneThePeerNeverSaw_staysDeletedOnThePeer() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'x', 'v': 1})")
            try await server.execute("DELETE FROM cars WHERE _id = 'x'")
            let a = try openPeer(dir.path)
            _ = try a.subscribe(Self.all)
            try await server.syncOnce(a)
            _ = try a.execute("INSERT INTO cars INITIAL DOCUMENTS ({'_id': 'x', 'v': 0}) ON ID CONFLICT DO NOTHING")
            #expect(try Self.snapshot(a).count == 1)
            try await server.syncOnce(a)
            #expect(try await server.items("SELECT * FROM cars").isEmpty)
            #expect(try Self.snapshot(a).isEmpty)
            a.close()
        }
    }

    @Test func restartedPeer_resumesFromItsCheckpoint_andResendsUploadsWithoutDuplicates() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            for i in 0..<5 { try await server.execute("INSERT INTO cars DOCUMENTS (:d)", ["d": ["_id": .string("c\(i)"), "n": 0]]) }
            do {
                let peer = try openPeer(dir.path)
                _ = try peer.subscribe(Self.all)
                let first = try await server.syncOnce(peer)
                #expect(first.receivedEntries == 5)
                #expect(peer.checkpoint(for: peer.subscriptions[0]) != nil)
                // An upload whose ack is lost: send it, then put the outbox back as it was before the ack.
                let before = peer.state.withLock { $0.store.document(DocumentRef(collection: "cars", id: "c0"))?.versionVector }
                _ = try peer.execute("UPDATE cars APPLY n INCREMENT BY 10 WHERE _id = 'c0'")
                try await server.syncOnce(peer)
                #expect(peer.pendingUploadCount == 0)
                var lost = Commit(clock: 0)
                let server = try #require(peer.linkedServers.first)
                lost.outbox = [(server, DocumentRef(collection: "cars", id: "c0"), before)]
                try peer.state.withLock { st throws(SmallPeerError) in try st.commit(lost, documents: []) }
                // And one more change made offline, never sent.
                _ = try peer.execute("UPDATE cars APPLY n INCREMENT BY 1 WHERE _id = 'c1'")
                #expect(peer.pendingUploadCount == 2)
                peer.close()
            }
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'new', 'n': 0})")

            let reopened = try openPeer(dir.path)
            #expect(reopened.pendingUploadCount == 2)
            _ = try reopened.subscribe(Self.all)
            let status = try await server.syncOnce(reopened)
            #expect(status.receivedEntries == 1)  // only the new document: resumed, not re-synced
            #expect(status.uploadedDocuments == 2)
            #expect(reopened.pendingUploadCount == 0)
            let rest = try await server.items("SELECT _id, n FROM cars WHERE _id IN ['c0', 'c1'] ORDER BY _id")
            #expect(rest.map { $0["n"]?.doubleValue } == [10, 1])  // the re-sent increment counted once
            #expect(try Self.snapshot(reopened) == (try await server.items("SELECT * FROM cars ORDER BY _id")))
        }
    }

    @Test func badKey_failsWithTheRefusal() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let peer = try openPeer(dir.path)
            let client = try server.client(peer, key: "not-a-key")
            await #expect(throws: SyncClient.ClientError.self) { try await client.waitUntilCaughtUp(timeout: .seconds(10)) }
            #expect(client.status.phase == .failed)
            #expect(client.status.lastError?.contains("4001") == true)
            await client.stop()
        }
    }

    /// A server that accepts the WebSocket and then refuses the session (here 4003, too many
    /// sessions: not final) is retried with the growing backoff, not at the base delay each time.
    @Test func aRefusalAfterTheHandshake_isRetriedWithBackoff() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestPostgres.withDatabase { db in
            let server = try await InProcessServer.start(on: db) { $0.maxSyncSessions = 0 }
            try await afterwards({ await server.stop() }) {
                let peer = try openPeer(dir.path)
                var configuration = SyncClient.Configuration(url: "ws://127.0.0.1:\(server.port)", apiKey: try await server.newKey())
                configuration.reconnectBase = .milliseconds(100)
                let started = ContinuousClock.now
                let client = try SyncClient(peer: peer, configuration: configuration)
                // Delays of 100, 200, 400, 800 ms before links 2 to 5, each jittered down to half at
                // most: the fifth link opens 750 ms after the first at the earliest; at the base
                // delay every time it would open within 400 ms. A loaded machine only adds time, so
                // the bound is a lower one.
                #expect(await eventually { client.status.linksOpened >= 5 && client.status.lastError?.contains("4003") == true },
                        "\(client.status)")
                let elapsed = ContinuousClock.now - started
                let status = client.status
                await client.stop()
                #expect(status.sessions == 0, "\(status)")
                #expect(elapsed >= .milliseconds(750), "5 links in \(elapsed): no backoff")
            }
        }
    }

    @Test func jwtCredentials_andARefusedSubscriptionIsReported() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'j', 'n': 1})")
            try await server.execute("INSERT INTO secrets DOCUMENTS ({'_id': 's', 'n': 1})")
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            _ = try peer.subscribe("SELECT * FROM secrets")
            let client = try server.client(peer, jwt: try server.jwt(read: ["cars"], write: ["cars"]))
            try await client.waitUntilCaughtUp(timeout: .seconds(20))
            #expect(try Self.snapshot(peer) == [["_id": "j", "n": 1]])
            #expect(try Self.snapshot(peer, "secrets").isEmpty)
            #expect(client.status.subscriptionErrors.keys.contains { $0.hasPrefix("SELECT * FROM secrets") })
            await client.stop()
        }
    }

    /// `SyncClient.updateCredentials` sends the new token in the running session (`auth`): the
    /// session goes on (no reconnect) under the new token's scopes, so a narrowed token stops the
    /// delivery of the collection it no longer reads.
    @Test func updateCredentials_refreshesTheTokenInTheSession_andANarrowerOneStopsADroppedCollection() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            _ = try peer.subscribe("SELECT * FROM secrets")
            let client = try server.client(peer, jwt: try server.jwt(read: ["cars", "secrets"], write: ["cars"]))
            try await client.waitUntilCaughtUp(timeout: .seconds(20))
            try await server.execute("INSERT INTO secrets DOCUMENTS ({'_id': 'before', 'n': 1})")
            #expect(try await eventually { try Self.snapshot(peer, "secrets").count == 1 }, "the secret reaches the peer")

            client.updateCredentials(jwt: try server.jwt(read: ["cars"], write: ["cars"]))
            #expect(await eventually { client.status.credentialRefreshes == 1 }, "the server accepted the new token")
            #expect(client.status.sessions == 1, "the session went on")
            #expect(await eventually {
                client.status.subscriptionErrors.keys.contains { $0.hasPrefix("SELECT * FROM secrets") }
            }, "the secrets subscription ended")
            try await server.execute("INSERT INTO secrets DOCUMENTS ({'_id': 'after', 'n': 2})")
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after', 'n': 3})")
            #expect(try await eventually { try Self.snapshot(peer).contains(["_id": "after", "n": 3]) }, "cars still arrive")
            #expect(try Self.snapshot(peer, "secrets") == [["_id": "before", "n": 1]], "nothing of secrets after the narrowing")
            await client.stop()
        }
    }

    @Test func serverRestart_clientReconnectsWithBackoff_andUploadsWhatWasWrittenMeanwhile() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestPostgres.withDatabase { db in
            let first = try await TestServer.start(db)
            let port = first.port  // the restarted server takes the same port
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            let client = try first.client(peer)
            try await afterwards({ await client.stop() }) {
                try await afterwards({ await first.stop() }) { try await client.waitUntilCaughtUp(timeout: .seconds(20)) }
                #expect(await eventually { client.status.phase == .connecting }, "the client notices the server is gone")
                _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'while-down', 'n': 1})")
                try await Task.sleep(for: .milliseconds(300))  // a few failed attempts with backoff
                let second = try await TestServer.start(db, port: port, key: first.key)
                try await afterwards({ await second.stop() }) {
                    try await second.execute("INSERT INTO cars DOCUMENTS ({'_id': 'from-rest', 'n': 2})")
                    #expect(try await eventually {
                        try await second.items("SELECT _id FROM cars WHERE _id = 'while-down'").count == 1
                    }, "the peer's write reaches the restarted server")
                    #expect(try await eventually { try Self.snapshot(peer).count == 2 }, "the REST write reaches the peer")
                    #expect(client.status.sessions >= 2)
                }
            }
        }
    }

    @Test func resumeTheServerCannotServe_fullResync_evictsWhatWasNotResent() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        _ = try peer.subscribe(Self.all)
        try await TestServer.with { first in
            try await first.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'v': 1}), ({'_id': 'gone', 'v': 1})")
            for i in 0..<10 { try await first.execute("INSERT INTO other DOCUMENTS (:d)", ["d": ["_id": .string("o\(i)")]]) }
            _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'mine', 'v': 1})")
            _ = try peer.execute("EVICT FROM cars WHERE _id = 'mine'")  // nothing pending for it
            try await first.syncOnce(peer)
            #expect(try Self.snapshot(peer).count == 2)
        }
        // The same server (its site) on another database, as after a restore from an older backup:
        // the stored checkpoint is above its newest transaction, so the server falls back to a full
        // initial sync, and the peer evicts what it did not get again.
        let site = try #require(peer.linkedServers.first)
        try await TestPostgres.withDatabase { db in
            await (try await TestServer.start(db)).stop()  // creates the schema
            let c = try await db.connect()
            _ = try await c.query("UPDATE bigpeer_identity SET site_id = \(Int64(bitPattern: site))")
            await c.close()
            let second = try await TestServer.start(db)
            try await afterwards({ await second.stop() }) {
                try await second.execute("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'v': 2})")
                _ = try peer.execute("INSERT INTO cars DOCUMENTS ({'_id': 'local', 'v': 9})")  // not uploaded yet: kept
                let status = try await second.syncOnce(peer)
                #expect(status.receivedEntries >= 1)
                #expect(try Self.snapshot(peer).compactMap { $0["_id"] } == ["a", "local"])
                #expect(peer.linkedServers == [site])
            }
        }
    }

    @Test func closingThePeer_stopsItsClient_insteadOfRetrying() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        try await TestServer.with { server in
            let peer = try openPeer(dir.path)
            _ = try peer.subscribe(Self.all)
            let client = try server.client(peer)
            try await client.waitUntilCaughtUp(timeout: .seconds(20))
            peer.close()
            try await server.execute("INSERT INTO cars DOCUMENTS ({'_id': 'after-close'})")
            #expect(await eventually { client.status.phase == .stopped || client.status.phase == .failed }, "the client stops once the store is closed")
            let sessions = client.status.sessions
            try await Task.sleep(for: .milliseconds(500))
            #expect(client.status.sessions == sessions)  // no reconnect loop
            #expect(client.status.lastError?.contains("closed") == true)
            await client.stop()
        }
    }
}
