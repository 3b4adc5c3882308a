// The presence rows shared by the instances of one database (migrations/0011_presence.sql,
// docs/LOCAL-NODE.md "Presence"): one row per instance, rewritten at every heartbeat.

import Postgres

extension DocumentStore {
    /// Writes this instance's row (`records`: an encoded `presence` message) valid for `ttlSeconds`,
    /// and drops the rows of instances that stopped writing.
    public func publishPresence(instance: String, records: [UInt8], ttlSeconds: Int) async throws(StoreError) {
        do {
            _ = try await pool.query("""
                INSERT INTO bigpeer_presence (instance, records, expires_at)
                VALUES (\(instance), \(PostgresBytea(records)), now() + make_interval(secs => \(Int64(ttlSeconds))))
                ON CONFLICT (instance) DO UPDATE SET records = excluded.records, expires_at = excluded.expires_at
                """)
            _ = try await pool.query("DELETE FROM bigpeer_presence WHERE expires_at < now()")
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The rows of the other instances that have not expired.
    public func otherInstancesPresence(than instance: String) async throws(StoreError) -> [[UInt8]] {
        do {
            return try await pool.query("""
                SELECT records FROM bigpeer_presence WHERE instance <> \(instance) AND expires_at > now() ORDER BY instance
                """).map { row in try row.decode(0, as: PostgresBytea.self).bytes }
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Removes this instance's row (at shutdown: the others drop its peers at once).
    public func withdrawPresence(instance: String) async throws(StoreError) {
        do {
            _ = try await pool.query("DELETE FROM bigpeer_presence WHERE instance = \(instance)")
        } catch {
            throw StoreError.from(error)
        }
    }
}
