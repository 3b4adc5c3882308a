import BigPeerTestSupport
import CRDT
import Postgres
import Sockets
import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Sessions on a real PostgreSQL: the store side of the protocol end to end, in-process.
@Suite struct SyncIntegrationTests {
    static let car1 = DocumentRef(collection: "cars", id: "car-1")
    static let car2 = DocumentRef(collection: "cars", id: "car-2")
    static let car3 = DocumentRef(collection: "cars", id: "car-3")

    func serverValue(_ store: DocumentStore, _ collection: String, _ id: String) async throws -> Value? {
        try await store.execute("SELECT * FROM \(collection) WHERE _id = :id", arguments: ["id": .string(id)]).items.first
    }

    @Test func restWrites_reachASubscribedPeer_andARedCarTurnedBlueLeaves() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-1', 'color': 'red'}), ({'_id': 'car-2', 'color': 'blue'}), ({'_id': 'car-0', 'color': 'red'}), ({'_id': 'car-5', 'color': 'red'})")
            let peer = TestPeer(site: 101)
            try await peer.connect(store: store)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"])))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            #expect(await peer.value(Self.car1) == (try await serverValue(store, "cars", "car-1")))
            #expect(await peer.value(Self.car2) == nil, "blue cars are not sent")
            let docs = await peer.messages().filter { if case .documents = $0 { true } else { false } }
            #expect(docs.count >= 2, "pages of 2 rows")

            let t1 = try await store.execute("UPDATE cars SET speed = 5 WHERE _id = 'car-1'").transactionID
            try await peer.waitForCheckpoint(t1)
            #expect(await peer.value(Self.car1) == (try await serverValue(store, "cars", "car-1")))

            let t2 = try await store.execute("UPDATE cars SET color = 'blue' WHERE _id = 'car-1'").transactionID
            try await peer.waitForCheckpoint(t2)
            #expect(await peer.value(Self.car1)?["color"] == "blue", "the change that makes it leave is delivered")

            let t3 = try await store.execute("UPDATE cars SET speed = 9 WHERE _id = 'car-1'").transactionID
            let t4 = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-3', 'color': 'red'})").transactionID
            try await peer.waitForCheckpoint(t4)
            let later = await peer.messages().contains { m in
                if case .changes(t3, _) = m { true } else { false }
            }
            #expect(!later, "no changes for a car that left")
            #expect(await peer.value(Self.car1)?["speed"] == 5)
            #expect(await peer.value(Self.car3) == (try await serverValue(store, "cars", "car-3")), "a new red car arrives in full")
            await peer.disconnect()
        }
    }

    /// A `want` of a document the server has no row for (never written, or evicted there) is
    /// answered with `gone` (PROTOCOL.md §4.7), next to the state of one it has: before, the peer
    /// got no answer for it and, if nothing else qualified, nothing at all.
    @Test func want_ofADocumentWithoutARow_isAnsweredGone() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-1', 'color': 'red'}), ({'_id': 'car-2', 'color': 'red'})")
            let peer = TestPeer(site: 107)
            try await peer.connect(store: store, capabilities: [SyncCapability.gone])
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            _ = try await store.execute("EVICT FROM cars WHERE _id = 'car-2'")
            let unknown = DocumentRef(collection: "cars", id: "car-never")
            let start = await peer.messages().count
            await peer.send(.want([unknown]))
            let answer = try await peer.waitFor(from: start) { if case .gone = $0 { true } else { false } }
            #expect(answer == .gone([unknown]))
            let mid = await peer.messages().count
            await peer.send(.want([Self.car1, Self.car2]))
            let second = try await peer.waitFor(from: mid) { if case .gone = $0 { true } else { false } }
            #expect(second == .gone([Self.car2]), "evicted on the server: no row")
            let state = try await peer.waitFor(from: mid) { if case .changes = $0 { true } else { false } }
            guard case .changes(_, let entries) = state else { return }
            #expect(entries.map(\.document) == [Self.car1])
            await peer.disconnect()
        }
    }

    @Test func twoPeers_uploadOfflineEdits_andConverge() async throws {
        try await withSyncServer { store, _ in
            let a = TestPeer(site: 201), b = TestPeer(site: 202)
            try await a.connect(store: store)
            try await b.connect(store: store)
            for p in [a, b] {
                await p.send(.subscribe(Subscribe(id: 7, query: "SELECT * FROM notes")))
                _ = try await p.waitFor { if case .synced(7, _) = $0 { true } else { false } }
            }
            let note = DocumentRef(collection: "notes", id: "n1")
            let created = try await a.edit(note, ["text": "from a", "n": 1])
            guard case .ack(_, let t1, let rejected) = try await a.upload([UploadEntry(document: note, delta: created)]) else { Issue.record("no ack"); return }
            #expect(rejected.isEmpty)
            try await b.waitForCheckpoint(t1)
            #expect(await b.value(note) == (try await serverValue(store, "notes", "n1")), "b gets the new note in full")

            // Concurrent edits of different fields on both peers, then both upload.
            let da = try await a.edit(note, ["n": 2])
            let db = try await b.edit(note, ["text": "from b"])
            guard case .ack(_, let ta, _) = try await a.upload([UploadEntry(document: note, delta: da)]),
                  case .ack(_, let tb, _) = try await b.upload([UploadEntry(document: note, delta: db)]) else { Issue.record("no ack"); return }
            let head = max(ta, tb)
            try await a.waitForCheckpoint(head)
            try await b.waitForCheckpoint(head)
            let server = try await serverValue(store, "notes", "n1")
            #expect(server == ["_id": "n1", "text": "from b", "n": 2])
            #expect(await a.value(note) == server)
            #expect(await b.value(note) == server)
            let echo = await a.messages().contains { if case .changes(ta, _) = $0 { true } else { false } }
            #expect(!echo, "a's own upload is not echoed back to it")
            // Re-sending an upload is harmless.
            guard case .ack(_, _, let again) = try await a.upload([UploadEntry(document: note, delta: da)]) else { Issue.record("no ack"); return }
            #expect(again.isEmpty)
            #expect(try await serverValue(store, "notes", "n1") == server)
            await a.disconnect()
            await b.disconnect()
        }
    }

    @Test func resume_fromACheckpoint_sendsOnlyWhatIsNew() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-1', 'color': 'red'}), ({'_id': 'car-2', 'color': 'red'})")
            let first = TestPeer(site: 301)
            try await first.connect(store: store)
            await first.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await first.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            let cp = await first.checkpoint
            let held = await first.docs
            await first.disconnect()

            let t = try await store.execute("UPDATE cars SET color = 'green' WHERE _id = 'car-2'").transactionID
            let again = TestPeer(site: 301)
            await again.adoptAll(held)
            try await again.connect(store: store)
            let have = held.keys.map { DocumentHash.of($0) }.sorted()
            await again.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", checkpoint: cp, have: have)))
            _ = try await again.waitFor { if case .synced(1, let c) = $0 { c == cp } else { false } }
            try await again.waitForCheckpoint(t)
            let messages = await again.messages()
            #expect(!messages.contains { if case .documents = $0 { true } else { false } }, "no initial sync on resume")
            var entries: [ChangeEntry] = []
            for case .changes(_, let e) in messages { entries += e }
            #expect(entries.map(\.document) == [Self.car2], "only the change made while away")
            #expect(entries.allSatisfy { if case .delta = $0.payload { true } else { false } }, "as a delta, not a full state")
            #expect(await again.value(Self.car2) == (try await serverValue(store, "cars", "car-2")))
            #expect(await again.wants == 0)
            await again.disconnect()
        }
    }

    @Test func aPeerThatGrantsNoCredit_isNotBuffered() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-1', 'color': 'red'})")
            let peer = TestPeer(site: 401, grantCredit: false)
            try await peer.connect(store: store, credit: 65536)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            let blob = String(repeating: "x", count: 4000)
            var last: Int64 = 0
            for i in 0..<60 {
                last = try await store.execute("UPDATE cars SET blob = :b WHERE _id = 'car-1'", arguments: ["b": .string(blob + String(i))]).transactionID
            }
            // Let the session run until it has stopped for lack of credit: no credit left and no
            // read in flight, so nothing more can go out until the peer grants more.
            let conn = try #require(await peer.connection)
            #expect(await eventually { conn.inspect { $0.credit <= 0 && $0.outstanding == nil } }, "the session did not stop")
            let bytes = await peer.receivedDataBytes
            #expect(bytes <= 65536 + 8000, "at most the window plus one message went out")
            let (credit, cursor, outstanding) = conn.inspect { ($0.credit, $0.cursor ?? 0, $0.outstanding) }
            #expect(credit <= 0)
            #expect(cursor < last, "the session stopped at its cursor")
            #expect(outstanding == nil, "and holds no read in flight or queued data")
            // Credit returns: it reads on from its cursor and catches up.
            await peer.setGrantCredit(true)
            await peer.grant(1 << 20)
            try await peer.waitForCheckpoint(last)
            #expect(await peer.value(Self.car1) == (try await serverValue(store, "cars", "car-1")))
            await peer.disconnect()
        }
    }
}

extension TestPeer {
    func adoptAll(_ held: [DocumentRef: Document]) { docs.merge(held) { _, new in new } }
}

extension SyncIntegrationTests {
    /// NOTIFY is not durable: a write committed while the instance's listener is disconnected is
    /// still delivered, because the feed catches up from the change log on `.reconnected`.
    @Test func writesWhileTheListenerIsDown_areDeliveredAfterItReconnects() async throws {
        try await withSyncServer { store, _ in
            let peer = TestPeer(site: 501)
            try await peer.connect(store: store)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            let listening = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            #expect(try await store.pool.query(PostgresQuery(unsafeSQL: listening))[0].decode(0, as: Int64.self) == 1)
            _ = try await store.pool.query(PostgresQuery(unsafeSQL: """
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()
                """))
            // Write while nobody listens (the test's listener waits 2 s before reconnecting).
            #expect(try await eventually { try await store.pool.query(PostgresQuery(unsafeSQL: listening))[0].decode(0, as: Int64.self) == 0 })
            let t = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-9', 'color': 'red'})").transactionID
            try await peer.waitForCheckpoint(t)
            #expect(await peer.value(DocumentRef(collection: "cars", id: "car-9")) == (try await serverValue(store, "cars", "car-9")))
            await peer.disconnect()
        }
    }
}

extension SyncIntegrationTests {
    /// Two BigPeer instances (stores, feeds, listeners) on one database: a peer on instance A
    /// receives a REST write made through instance B and an upload made by a peer on B.
    @Test func twoInstancesOnOneDatabase_fanOutToEachOther() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            var instances: [(DocumentStore, ChangeFeed, PostgresListener, Task<Void, Never>)] = []
            for _ in 0..<2 {
                let store = try await DocumentStore.open(pool: db.makePool())
                let feed = store.changeFeed
                try await feed.start()
                let listener = try await PostgresListener(db.configuration, channels: ["bigpeer_changes"], loop: TestLoops.group.next())
                instances.append((store, feed, listener, Task { await feed.follow(listener) }))
            }
            let (storeA, _, _, _) = instances[0], (storeB, _, _, _) = instances[1]
            let onA = TestPeer(site: 601), onB = TestPeer(site: 602)
            try await onA.connect(store: storeA)
            try await onB.connect(store: storeB)
            for p in [onA, onB] {
                await p.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
                _ = try await p.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            }
            let t1 = try await storeB.execute("INSERT INTO cars DOCUMENTS ({'_id': 'rest-b', 'color': 'red'})").transactionID
            try await onA.waitForCheckpoint(t1)
            #expect(await onA.value(DocumentRef(collection: "cars", id: "rest-b"))?["color"] == "red")

            let ref = DocumentRef(collection: "cars", id: "peer-b")
            let delta = try await onB.edit(ref, ["color": "green"])
            guard case .ack(_, let t2, _) = try await onB.upload([UploadEntry(document: ref, delta: delta)]) else { Issue.record("no ack"); return }
            try await onA.waitForCheckpoint(t2)
            #expect(await onA.value(ref) == (try await serverValue(storeA, "cars", "peer-b")))
            await onA.disconnect()
            await onB.disconnect()
            for (_, _, listener, task) in instances {
                task.cancel()
                await listener.stop()
            }
        }
    }

    /// docs/PERFORMANCE goal from issue #8: a one-field update of a 250 KB document costs under
    /// 200 bytes on the wire (the whole `changes` message, CBOR, before transport framing).
    @Test func oneFieldUpdateOfA250KBDocument_isASmallMessage() async throws {
        try await withSyncServer { store, _ in
            let big = String(repeating: "z", count: 250_000)
            _ = try await store.execute("INSERT INTO docs DOCUMENTS ({'_id': 'big', 'body': :b, 'n': 1})", arguments: ["b": .string(big)])
            let peer = TestPeer(site: 701)
            try await peer.connect(store: store)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM docs")))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            let t = try await store.execute("UPDATE docs SET n = 2 WHERE _id = 'big'").transactionID
            let m = try await peer.waitFor { if case .changes(let txn, _) = $0 { txn == t } else { false } }
            let size = m.encode().count
            #expect(size < 200, "changes message of \(size) bytes")
            #expect(await peer.value(DocumentRef(collection: "docs", id: "big"))?["n"] == 2)
            await peer.disconnect()
        }
    }
}
