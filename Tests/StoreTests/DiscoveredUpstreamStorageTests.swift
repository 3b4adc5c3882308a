import BigPeerTestSupport
import Postgres
import Testing
@testable import Store

/// The rows of local nodes found on the LAN (docs/STORAGE.md, "Upstream replication"): marked
/// seen, listed apart from configured upstreams, and deleted with their checkpoints once not seen
/// for the given time; rows of configured upstreams never.
@Suite struct DiscoveredUpstreamStorageTests {
    static func lastSeen(_ store: DocumentStore, _ upstream: String, secondsAgo: Int) async throws {
        _ = try await store.pool.query("UPDATE bigpeer_upstream SET last_seen_at = now() - make_interval(secs => \(Double(secondsAgo))) WHERE upstream = \(upstream)")
    }

    static func discoveredKeys(_ store: DocumentStore) async throws -> [String] {
        try await store.pool.query("SELECT discovered_peer_key FROM bigpeer_upstream WHERE discovered_peer_key IS NOT NULL ORDER BY 1")
            .map { try $0.decode(0, as: String.self) }
    }

    @Test func staleDiscoveredRowsAreDeleted_freshOnesAndConfiguredUpstreamsKept() async throws {
        try await withStore { store, _ in
            _ = try await store.upstreamRecord("ws://cloud/api/v4/sync")
            _ = try await store.upstreamRecord("lan:aa")  // a session created the row before it was marked
            try await store.markDiscoveredUpstreamSeen("lan:aa", peerKey: "aa")
            try await store.markDiscoveredUpstreamSeen("lan:bb", peerKey: "bb")
            _ = try await store.pool.query("""
                INSERT INTO bigpeer_upstream_checkpoints (upstream, subscription, checkpoint) VALUES ('lan:aa', '["q",{}]', 7)
                """)
            #expect(try await Self.discoveredKeys(store) == ["aa", "bb"])
            #expect(try await store.otherUpstreams(than: "none").map(\.upstream) == ["ws://cloud/api/v4/sync"], "discovered rows are not listed there")

            try await Self.lastSeen(store, "lan:aa", secondsAgo: 120)
            #expect(try await store.forgetDiscoveredUpstreams(notSeenForSeconds: 60) == ["aa"])
            #expect(try await Self.discoveredKeys(store) == ["bb"])
            let checkpoints = try await store.pool.query("SELECT count(*) FROM bigpeer_upstream_checkpoints WHERE upstream = 'lan:aa'")[0].decode(0, as: Int64.self)
            #expect(checkpoints == 0, "its checkpoints went with it")
            // Seen again: the row is marked fresh and kept.
            try await Self.lastSeen(store, "lan:bb", secondsAgo: 120)
            try await store.markDiscoveredUpstreamSeen("lan:bb", peerKey: "bb")
            #expect(try await store.forgetDiscoveredUpstreams(notSeenForSeconds: 60).isEmpty)
            let rows = try await store.pool.query("SELECT upstream FROM bigpeer_upstream ORDER BY 1").map { try $0.decode(0, as: String.self) }
            #expect(rows == ["lan:bb", "ws://cloud/api/v4/sync"], "a configured upstream's row never expires")
        }
    }
}
