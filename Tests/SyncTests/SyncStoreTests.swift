import BigPeerTestSupport
import CRDT
import DQL
import Postgres
import Testing
import Values
@testable import Store
@testable import Sync
@testable import SyncProtocol

/// The store entry points the sync protocol uses, against a real PostgreSQL.
@Suite struct SyncStoreTests {
    @Test func mergeDeltas_rejectsAGap_acceptsTheFullState_andIsIdempotent() async throws {
        try await withSyncServer { store, _ in
            var replica = Replica(site: SiteID(77))
            var doc = try Document(id: "n1")
            _ = try doc.upsert(["a": 1], replica: &replica)
            let v1 = doc.versionVector
            _ = try doc.upsert(["b": 2], replica: &replica)
            let onlySecond = doc.delta(since: v1).encode()
            let first = try await store.mergeDeltas([MergeItem(collection: "notes", id: "n1", delta: onlySecond),
                                                     MergeItem(collection: "notes", id: "n2", delta: [0xFF, 0x00])], origin: 77)
            #expect(first.rejected.map(\.index) == [0, 1], "a delta without its base and garbage are both rejected")
            #expect(first.rejected[0].message.contains("full state"))
            #expect(try await store.execute("SELECT * FROM notes").items.isEmpty, "nothing was written")

            let full = doc.delta(since: VersionVector()).encode()
            let second = try await store.mergeDeltas([MergeItem(collection: "notes", id: "n1", delta: full)], origin: 77)
            #expect(second.rejected.isEmpty)
            #expect(try await store.execute("SELECT * FROM notes").items == [["_id": "n1", "a": 1, "b": 2]])
            let third = try await store.mergeDeltas([MergeItem(collection: "notes", id: "n1", delta: full)], origin: 77)
            #expect(third.rejected.isEmpty && third.txn == second.txn, "a re-sent upload writes nothing")
            let log = try await store.changeFeed.read(after: .end(of: 0))
            #expect(log.rows.count == 1 && log.rows[0].origin == 77 && log.rows[0].value == ["_id": "n1", "a": 1, "b": 2])
        }
    }

    @Test func syncPage_walksEveryMatchingDocument_inIDOrder_withinTheByteBudget() async throws {
        try await withSyncServer { store, _ in
            var docs: [String] = []
            for i in 0..<23 { docs.append("{'_id': 'c\(i < 10 ? "0" : "")\(i)', 'n': \(i), 'pad': '\(String(repeating: "p", count: 100))'}") }
            _ = try await store.execute("INSERT INTO cars DOCUMENTS " + docs.map { "(\($0))" }.joined(separator: ", "))
            guard case .select(let s) = try DQL.parse("SELECT * FROM cars WHERE n % 3 = 0 AND lower(pad) = pad") else { Issue.record("not a SELECT"); return }
            var after: Value? = nil
            var seen: [Value] = []
            var pages = 0
            while true {
                let page = try await store.syncPage(s, arguments: [:], after: after, limit: 4, maxBytes: 400)
                pages += 1
                seen += page.rows.map(\.id)
                #expect(page.rows.count <= 4)
                if page.isLast { break }
                after = page.nextAfter
                #expect(pages < 50)
            }
            let expected: [Value] = stride(from: 0, to: 23, by: 3).map { .string("c" + ($0 < 10 ? "0" : "") + String($0)) }
            #expect(seen == expected)
            #expect(pages >= 6, "pages were cut by rows and bytes")
        }
    }

    /// Pages come in binary format (states as raw bytes, ids as jsonb): the same states and ids
    /// as the text-format fetch path, object and non-ASCII ids included, and the boundary's
    /// `stateBytes` is exactly the states' size.
    @Test func readSyncPage_binaryColumns_matchTheTextFormatFetch() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("""
                INSERT INTO cars DOCUMENTS ({'_id': 'zürich-ü', 'n': 1}), ({'_id': {'vin': 'W0L1', 'n': 3}, 'n': 2}),
                  ({'_id': 'a', 'blob': '\(String(repeating: "x", count: 3000))'}), ({'_id': 'Ω-7', 'n': 4})
                """)
            guard case .select(let s) = try DQL.parse("SELECT * FROM cars") else { Issue.record("not a SELECT"); return }
            let read = try await store.readSyncPage(s, arguments: [:], after: nil, limit: 10, maxBytes: 1 << 20)
            let rows = try await read.documents()
            #expect(read.rowCount == 4 && read.isLast && rows.count == 4)
            #expect(read.stateBytes == rows.reduce(0) { $0 + $1.state.count })
            #expect(read.nextAfter == rows.last?.id)
            let fetched = try await store.fetchDocuments(rows.map { ("cars", $0.id) })
            var byID: [Value: [UInt8]] = [:]
            for d in fetched { byID[d.id] = d.state }
            #expect(byID.count == 4)
            for row in rows { #expect(byID[row.id] == row.state, "\(row.id)") }
            let ids = Set(rows.map(\.id))
            #expect(ids == ["zürich-ü", .object(["vin": "W0L1", "n": 3]), "a", "Ω-7"])
            for row in rows { _ = try Document.decode(row.state) }
        }
    }

    /// A tombstone has no value: the change log's delete row and a fetch of the deleted document
    /// give nil, not JSON null (which a live subscription would evaluate its condition against).
    @Test func tombstonesHaveNoValue_inTheChangeLogAndInFetches() async throws {
        try await withSyncServer { store, _ in
            _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'gone', 'n': 1})")
            let deleted = try await store.execute("DELETE FROM cars WHERE _id = 'gone'").transactionID
            let page = try await store.changeFeed.read(after: .end(of: deleted - 1))
            #expect(page.rows.count == 1 && page.rows[0].kind == "delete")
            #expect(page.rows.first?.value == nil, "\(String(describing: page.rows.first?.value))")
            #expect(page.rows.first?.state != nil)
            let fetched = try await store.fetchDocuments([("cars", "gone")])
            #expect(fetched.count == 1 && fetched[0].value == nil, "\(fetched.map(\.value))")
        }
    }

    @Test func changeLogReachability() async throws {
        try await withSyncServer { store, _ in
            #expect(try await store.changeLogReaches(back: 0), "an empty log at transaction 0")
            #expect(!(try await store.changeLogReaches(back: 5)), "a checkpoint from the future")
            for i in 0..<3 { _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c\(i)'})") }
            #expect(try await store.changeLogReaches(back: 0))
            #expect(try await store.changeLogReaches(back: 3))
            _ = try await store.pool.query("DELETE FROM change_log WHERE txn <= 2")  // as pruning would
            #expect(!(try await store.changeLogReaches(back: 1)))
            #expect(try await store.changeLogReaches(back: 2))
        }
    }

    @Test func changeFeed_servesFromItsRing_orTheDatabase_identically() async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            // No LISTEN: the test decides when the feed reads.
            let store = try await DocumentStore.open(pool: db.makePool(), changeFeed: ChangeFeed.Limits(maxRingEntries: 3))
            let small = store.changeFeed
            try await small.start()
            _ = small.addListener { _ in }  // a session listens: the feed reads rows with their values
            for i in 0..<8 { _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'c\(i)', 'n': \(i)})") }
            await small.refresh()  // what a notification or a reconnect triggers: catch up from the log
            #expect(small.head == 8)
            #expect(small.cachedRead(after: .end(of: 6)) != nil && small.cachedRead(after: .end(of: 4)) == nil, "the ring keeps 6...8")
            // As a session reads them (`DocumentSyncStorage`).
            let fromRing = LogBatch(try await small.read(after: .end(of: 6)))
            let fromDatabase = LogBatch(try await small.read(after: .end(of: 0)))
            #expect(fromRing.entries.map(\.txn) == [7, 8] && fromRing.through == 8)
            #expect(fromDatabase.entries.map(\.txn) == Array(1...8) && fromDatabase.through == 8)
            #expect(Array(fromDatabase.entries.suffix(2)) == fromRing.entries)
            #expect(try await small.read(after: .end(of: 8)).rows.isEmpty)
        }
    }
}
