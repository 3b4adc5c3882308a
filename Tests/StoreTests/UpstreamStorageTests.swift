import BigPeerTestSupport
import CRDT
import Postgres
import SyncProtocol
import Testing
import Values
@testable import Store

/// The upload backlog as a local node reads it (docs/STORAGE.md, "Upstream replication"): in
/// commit order, the upstream's own changes and evictions skipped but passed, cut by bytes in
/// the database (only the kept rows' states are read), ending at the newest transaction once
/// everything was looked at.
@Suite struct UpstreamStorageTests {
    static let upstreamSite: Int64 = 0x7777

    @Test func backlogIsReadInCommitOrder_skippingTheUpstreamsChanges_andCutByBytes() async throws {
        try await withStore { store, _ in
            let pad = String(repeating: "p", count: 3000)
            let t1 = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'a', 'pad': '\(pad)'})").transactionID
            // A change from the upstream: merged with its site id as origin, never uploaded back.
            var fromUpstream = try Document(id: "u")
            var replica = Replica(site: SiteID(UInt64(Self.upstreamSite)))
            _ = try fromUpstream.upsert(["_id": "u", "v": 1], mode: .update, types: TypeDeclarations(), replica: &replica)
            let merged = try await store.mergeDeltas([MergeItem(collection: "c", id: "u", delta: fromUpstream.delta(since: VersionVector()).encode())],
                                                     origin: Self.upstreamSite)
            #expect(merged.rejected.isEmpty)
            let t3 = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'b', 'pad': '\(pad)'})").transactionID
            _ = try await store.execute("EVICT FROM c WHERE _id = 'b'")
            let t5 = try await store.execute("INSERT INTO c DOCUMENTS ({'_id': 'd'})").transactionID

            // 1 KB: the first row always stays (its state is 3 KB), the next would pass the bound.
            let start = ChangeLogPosition(txn: 0, seq: -1)
            var read = try await store.readUploadBacklog(after: start, excludingOrigin: Self.upstreamSite, maxRows: 100, maxBytes: 1000)
            #expect(read.rows.map(\.id) == ["a"])
            #expect(read.rows.first?.delta == nil && (read.rows.first?.state?.count ?? 0) > 3000, "a creation goes as its state")
            #expect(read.end == ChangeLogPosition(txn: t1, seq: 0))
            // The rest: the upstream's 'u' and the eviction passed, 'b' gone (evicted: nothing to send), 'd'.
            read = try await store.readUploadBacklog(after: read.end, excludingOrigin: Self.upstreamSite, maxRows: 100, maxBytes: 1 << 20)
            #expect(read.rows.map(\.id) == ["d"], "\(read.rows.map(\.id))")
            #expect(read.end == .end(of: t5))
            #expect(t3 > merged.txn)
            // Nothing after the newest transaction: the read ends there.
            read = try await store.readUploadBacklog(after: read.end, excludingOrigin: Self.upstreamSite, maxRows: 100, maxBytes: 1 << 20)
            #expect(read.rows.isEmpty && read.end == .end(of: t5))
            // A row bound: the end is the last row looked at, not the newest transaction.
            read = try await store.readUploadBacklog(after: start, excludingOrigin: Self.upstreamSite, maxRows: 2, maxBytes: 1 << 20)
            #expect(read.rows.map(\.id) == ["a"] && read.end == ChangeLogPosition(txn: merged.txn, seq: 0))
        }
    }

    /// A row of an upstream URL no longer used is reported: it holds retention back.
    @Test func otherUpstreamsAreListed() async throws {
        try await withStore { store, _ in
            _ = try await store.upstreamRecord("ws://old.example/api/v4/sync")
            try await store.saveUploadPosition("ws://old.example/api/v4/sync", .end(of: 0))
            _ = try await store.upstreamRecord("ws://new.example/api/v4/sync")
            let others = try await store.otherUpstreams(than: "ws://new.example/api/v4/sync")
            #expect(others.map(\.upstream) == ["ws://old.example/api/v4/sync"])
            #expect(others.first?.uploaded == .end(of: 0))
        }
    }

    /// Another database behind the URL (`recordUpstreamSite` with a new site id): what the old one
    /// acknowledged or sent, stored late, must not land in the row reset for the new one.
    @Test func positionsAndCheckpointsOfThePreviousUpstreamDatabase_areNotStoredAfterTheSwitch() async throws {
        try await withStore { store, _ in
            let key = "ws://cloud.example/api/v4/sync", old: Int64 = 0x51, new: Int64 = 0x52
            _ = try await store.upstreamRecord(key)
            _ = try await store.recordUpstreamSite(key, site: old)
            try await store.saveUploadPosition(key, .end(of: 7), site: old)
            #expect(try await store.upstreamRecord(key).uploaded == .end(of: 7))
            #expect(try await store.recordUpstreamSite(key, site: new))
            #expect(try await store.upstreamRecord(key).uploaded == ChangeLogPosition(txn: 0, seq: -1), "reset for the new database")
            try await store.saveUploadPosition(key, .end(of: 9), site: old)
            #expect(try await store.upstreamRecord(key).uploaded == ChangeLogPosition(txn: 0, seq: -1), "a late position of the old one is ignored")
            try await store.saveUploadPosition(key, .end(of: 3), site: new)
            #expect(try await store.upstreamRecord(key).uploaded == .end(of: 3))

            func merge(_ id: String, origin: Int64, checkpoint: Int64) async throws {
                var doc = try Document(id: .string(id))
                var replica = Replica(site: SiteID(UInt64(origin)))
                _ = try doc.upsert(["_id": .string(id)], mode: .update, types: TypeDeclarations(), replica: &replica)
                _ = try await store.mergeDeltas([MergeItem(collection: "c", id: .string(id), delta: doc.delta(since: VersionVector()).encode())],
                                                origin: origin, checkpoints: DownloadCheckpoints(upstream: key, checkpoints: ["sub": checkpoint]))
            }
            try await merge("from-old", origin: old, checkpoint: 40)
            #expect(try await store.upstreamRecord(key).checkpoints.isEmpty, "a checkpoint in the old database's log is not stored")
            #expect(try await store.items("SELECT * FROM c WHERE _id = 'from-old'").count == 1, "the data itself is kept (merging is always safe)")
            try await merge("from-new", origin: new, checkpoint: 12)
            #expect(try await store.upstreamRecord(key).checkpoints == ["sub": 12])
        }
    }
}
