import BigPeerTestSupport
import Postgres
import Sockets
import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// A live session receives a large transaction, read in pieces, completely: its `changes` come
/// in several messages, and no checkpoint covers the transaction before the last of them.
@Suite struct ChangeFeedPagingSessionTests {
    /// A store, a feed with small read bounds following NOTIFY, and a subscribed peer.
    func withSubscribedPeer(ringEntries: Int, _ body: (DocumentStore, ChangeFeed, TestPeer) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let store = try await DocumentStore.open(pool: db.makePool(),
                                                     changeFeed: ChangeFeed.Limits(maxRingEntries: ringEntries, readRows: 128, sessionRows: 100))
            let feed = store.changeFeed
            try await feed.start()
            let listener = try await PostgresListener(db.configuration, channels: [ChangeFeed.channel], loop: TestLoops.group.next())
            let follower = Task { await feed.follow(listener) }
            defer { follower.cancel() }
            let peer = TestPeer(site: 301)
            do {
                try await peer.connect(store: store)
                await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM bulk WHERE color = 'red'")))
                _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
                try await body(store, feed, peer)
                await peer.disconnect()
                await listener.stop()
            } catch {
                await peer.disconnect()
                await listener.stop()
                throw error
            }
        }
    }

    /// Ring large enough for the transaction (the session reads it from the ring in batches of
    /// 100 rows) and too small (dropped from the ring: the session reads the database in pages).
    @Test(arguments: [20_000, 500])
    func aLargeTransaction_reachesALiveSession_completely_withCheckpointsOnlyAtItsEnd(ringEntries: Int) async throws {
        try await withSubscribedPeer(ringEntries: ringEntries) { store, _, peer in
            let n = 2000
            // Every other document matches the subscription.
            var placeholders: [String] = [], arguments: [String: Value] = [:]
            for i in 0..<n {
                placeholders.append("(:d\(i))")
                arguments["d\(i)"] = ["_id": .string("b\(i)"), "color": .string(i % 2 == 0 ? "red" : "blue"), "n": .int(Int64(i))]
            }
            let t1 = try await store.execute("INSERT INTO bulk DOCUMENTS \(placeholders.joined(separator: ", "))", arguments: arguments).transactionID
            let t2 = try await store.execute("UPDATE bulk SET n = -1 WHERE _id = 'b0'").transactionID
            // Up to 60 s: a loaded full suite on two cores has taken more than TestPeer's 10 s here
            // (the feed's ~16 pages and the session's ~40 reads, in a debug build).
            _ = await eventually(within: .seconds(60)) {
                let (checkpoint, closed) = (await peer.checkpoint, await peer.closed)
                return checkpoint >= t2 || closed != nil
            }
            try await peer.waitForCheckpoint(t2)  // reports the session's state if it did not arrive
            for i in stride(from: 0, to: n, by: 2) {
                #expect(await peer.value(DocumentRef(collection: "bulk", id: .string("b\(i)")))?["n"] == .int(i == 0 ? -1 : Int64(i)))
            }
            #expect(await peer.value(DocumentRef(collection: "bulk", id: "b1")) == nil, "blue documents are not sent")
            let messages = await peer.messages()
            var delivered = 0, changesOfT1 = 0, lastChangesOfT1 = -1, firstCheckpointPastT1 = Int.max
            var lastTxn: Int64 = 0
            for (i, m) in messages.enumerated() {
                switch m {
                case .changes(let txn, let entries):
                    #expect(txn >= lastTxn, "txns never decrease")
                    lastTxn = txn
                    if txn == t1 {
                        changesOfT1 += 1
                        delivered += entries.count
                        lastChangesOfT1 = i
                    }
                case .checkpoint(let txn):
                    #expect(txn >= lastTxn, "txns never decrease")
                    lastTxn = txn
                    if txn >= t1 { firstCheckpointPastT1 = min(firstCheckpointPastT1, i) }
                default: break
                }
            }
            #expect(delivered == n / 2, "every matching document once")
            #expect(changesOfT1 >= n / 2 / 100, "in pieces (\(changesOfT1) messages)")
            #expect(lastChangesOfT1 < firstCheckpointPastT1, "no checkpoint covers t1 before its last row was sent")
        }
    }
}
