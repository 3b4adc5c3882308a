import BigPeerTestSupport
import Store
import Synchronization
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Issue #16: a live subscription's matching must not hold the session's event loop. A batch the
/// loop's slice cannot match is matched on the evaluation threads (`SyncConnection.deliverLog`),
/// with the same outcome as matching inline.
@Suite struct LiveMatchingTests {
    /// ~200 NFA states per character over 500 characters: ~100k steps per document (within the
    /// per-document budget), never matching; `n >= 0` then makes every document match.
    static let expensive = "SELECT * FROM c WHERE regexp_like(s, '(a|a){1,50}$x') OR n >= 0"

    static func insert(_ store: DocumentStore, _ count: Int) async throws {
        let docs = (0..<count).map { "({'n': \($0), 's': '\(String(repeating: "a", count: 500))'})" }.joined(separator: ", ")
        _ = try await store.execute("INSERT INTO c DOCUMENTS \(docs)")
    }

    static func changedIDs(_ peer: TestPeer) async -> Set<Value> {
        var ids = Set<Value>()
        for m in await peer.received { if case .changes(_, let e) = m { ids.formUnion(e.map(\.document.id)) } }
        return ids
    }

    @Test func anExpensiveBatchIsMatchedOffTheLoop_withTheSameOutcome() async throws {
        try await withSyncServer { store, _ in
            let peer = TestPeer(site: 0x61)
            try await peer.connect(store: store)
            await peer.send(.subscribe(Subscribe(id: 1, query: Self.expensive)))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            try await Self.insert(store, 20)
            #expect(await eventually { await Self.changedIDs(peer).count == 20 }, "every document matches and reaches the peer")
            let connection = try #require(await peer.connection)
            #expect(connection.batchesMatchedOffLoop.load(ordering: .relaxed) >= 1)
        }
    }

    @Test func aCheapBatchIsMatchedInline() async throws {
        try await withSyncServer { store, _ in
            let peer = TestPeer(site: 0x62)
            try await peer.connect(store: store)
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM c WHERE n >= 10")))
            _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
            try await Self.insert(store, 20)
            #expect(await eventually { await Self.changedIDs(peer).count == 10 }, "only n >= 10 reaches the peer")
            let connection = try #require(await peer.connection)
            #expect(connection.batchesMatchedOffLoop.load(ordering: .relaxed) == 0)
        }
    }
}
