// The rows of local nodes found on the LAN (migrations/0012_discovered_upstreams.sql,
// docs/LOCAL-NODE.md "Two nodes on one ship"): a `bigpeer_upstream` row named by the node's peer
// key, marked as discovered, with when it was last advertised. Rows of nodes gone for longer than
// `--lan-forget-after` are deleted, so they stop holding the change log back.

import Postgres

extension DocumentStore {
    /// Records that the node with `peerKey`, replicated with under the row `upstream`, is
    /// advertised now (creating the row if no session has yet).
    public func markDiscoveredUpstreamSeen(_ upstream: String, peerKey: String) async throws(StoreError) {
        do {
            _ = try await pool.query("""
                INSERT INTO bigpeer_upstream (upstream, discovered_peer_key, last_seen_at) VALUES (\(upstream), \(peerKey), now())
                ON CONFLICT (upstream) DO UPDATE SET discovered_peer_key = EXCLUDED.discovered_peer_key, last_seen_at = now()
                """)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Deletes the rows of discovered nodes not advertised for `seconds` (their download
    /// checkpoints go with them); returns the peer keys forgotten.
    public func forgetDiscoveredUpstreams(notSeenForSeconds seconds: Double) async throws(StoreError) -> [String] {
        do {
            return try await pool.query("""
                DELETE FROM bigpeer_upstream
                WHERE discovered_peer_key IS NOT NULL AND last_seen_at < now() - make_interval(secs => \(seconds))
                RETURNING discovered_peer_key
                """).map { try $0.decode(0, as: String.self) }
        } catch {
            throw StoreError.from(error)
        }
    }
}
