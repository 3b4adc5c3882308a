import BigPeerTestSupport
@testable import Store
@testable import Sync

/// Two BigPeer instances on one database (their own pools, read caches and change feeds), as the
/// change-feed tests need: one commits, the other must notice. `changeFeed`: a's feed's bounds.
func withTwoStores(changeFeed: ChangeFeed.Limits = ChangeFeed.Limits(), _ body: (DocumentStore, DocumentStore) async throws -> Void) async throws {
    try await TestPostgres.withDatabase { db in
        try await db.migrate()
        let a = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20, changeFeed: changeFeed)
        let b = try await DocumentStore.open(pool: db.makePool(), readCacheBytes: 1 << 20)
        try await body(a, b)
    }
}

extension ChangeFeed {
    /// What a notification of `txn` does, without a LISTEN session (the test decides when it arrives).
    func simulateNotification(_ txn: Int64) async {
        noteNotified(txn)
        await refresh(readRequired: false)
    }
}
