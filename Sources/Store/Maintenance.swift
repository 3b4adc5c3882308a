import DQL
import Postgres
import Values

// Maintenance keeps the two tables that only grow from growing forever (docs/STORAGE.md,
// "Maintenance"):
//
// - Tombstones: a deleted document's row stays (`deleted`, `deleted_at`) so the deletion syncs and
//   a late write cannot resurrect it unseen; after TOMBSTONE_TTL_DAYS it is reaped, i.e. the row
//   is deleted. A peer that was away longer may bring the document back (the usual TTL trade-off).
// - The change log: whole transactions older than CHANGE_LOG_RETENTION_DAYS are deleted from its
//   oldest end, never from the middle, so "the log is complete after cp iff cp >= min(txn) - 1"
//   (the sync resume check) stays true; a peer whose checkpoint falls before the pruned end
//   resumes with a full initial sync.
//
// One instance at a time runs it (a session-level advisory lock); every step is a statement of
// its own, so no long transaction holds locks or keeps old row versions alive.

/// What one maintenance run did.
public struct MaintenanceReport: Sendable, Equatable {
    /// False when another instance was running maintenance (this run did nothing).
    public var ran = false
    public var reapedTombstones = 0
    public var prunedChangeLogRows = 0
    /// The newest transaction pruned from the change log, if any was.
    public var prunedThrough: Int64?

    public init(ran: Bool = false, reapedTombstones: Int = 0, prunedChangeLogRows: Int = 0, prunedThrough: Int64? = nil) {
        self.ran = ran
        self.reapedTombstones = reapedTombstones
        self.prunedChangeLogRows = prunedChangeLogRows
        self.prunedThrough = prunedThrough
    }
}

extension DocumentStore {
    /// `pg_try_advisory_lock` key of maintenance ("bigpeer" and 1).
    static let maintenanceLock: Int64 = 0x6269_6770_6565_7201
    /// Tombstones per DELETE, and change-log rows looked at per pruning step.
    static let maintenanceBatch = 1000
    static let pruneWindow = 10_000

    /// Reaps expired tombstones and prunes the change log, with the TTL and retention stored in
    /// the server settings (`ALTER SYSTEM SET TOMBSTONE_TTL_DAYS = …`). Returns `ran: false` at
    /// once if another instance holds the maintenance lock.
    public func runMaintenance() async throws -> MaintenanceReport {
        try await pool.withConnection { conn in
            let locked = try await conn.query("SELECT pg_try_advisory_lock(\(Self.maintenanceLock))")
            guard try locked[0].decode(0, as: Bool.self) else { return MaintenanceReport() }
            do {
                let report = try await self.maintain(on: conn)
                _ = try await conn.query("SELECT pg_advisory_unlock(\(Self.maintenanceLock))")
                return report
            } catch {
                // A session that failed mid-way may still hold the lock: unlock (or, if the session
                // is gone, the server released it with the session).
                _ = try? await conn.query("SELECT pg_advisory_unlock(\(Self.maintenanceLock))")
                throw error
            }
        }
    }

    private func maintain(on conn: PostgresConnection) async throws -> MaintenanceReport {
        let settings = try await settings(on: conn)
        func days(_ s: SystemSetting) -> Int64 {
            if case .int(let n)? = settings[s.rawValue], SystemSetting.days.contains(n) { return n }
            if case .int(let n) = s.defaultValue { return n }
            return 30
        }
        let ttl = days(.tombstoneTTLDays), retention = days(.changeLogRetentionDays)
        var report = MaintenanceReport(ran: true)
        // Upstream replication (migrations/0010): nothing not yet uploaded may go. `floor` is the
        // newest transaction every upstream has entirely (a position inside a transaction, or
        // before its first row, covers only the ones before); the change log keeps every one after it,
        // and no tombstone written since the oldest of those transactions began is reaped (a
        // tombstone's `deleted_at` and its change-log row's `created_at` are the same `now()`).
        let floor = try await conn.query("""
            SELECT min(CASE WHEN uploaded_seq = \(Int32.max) THEN uploaded_txn ELSE uploaded_txn - 1 END) FROM bigpeer_upstream
            """)[0].decode(0, as: Int64?.self)
        var keepTombstonesSince = "'infinity'::timestamptz"
        if let floor, let since = try await conn.query("SELECT extract(epoch FROM min(created_at))::float8 FROM change_log WHERE txn > \(floor)")[0].decode(0, as: Double?.self) {
            keepTombstonesSince = "to_timestamp(\(Int64(since.rounded(.down))))"  // whole seconds, down: keeps more
        }
        // The condition is repeated on the DELETE itself: a tombstone revived (by an INSERT that
        // merged into it) after the inner SELECT chose it is re-checked under the row lock and kept.
        while true {
            let deleted = try await conn.query("""
                DELETE FROM documents WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM documents WHERE deleted AND deleted_at < now() - make_interval(days => \(Int32(ttl)))
                      AND deleted_at < \(unsafeRaw: keepTombstonesSince)
                    LIMIT \(Int32(Self.maintenanceBatch))))
                  AND deleted AND deleted_at < now() - make_interval(days => \(Int32(ttl)))
                  AND deleted_at < \(unsafeRaw: keepTombstonesSince)
                """).affectedRows ?? 0
            report.reapedTombstones += deleted
            // Shutdown (`BigPeerService.stop` cancels the schedule) waits for one batch at most.
            if deleted < Self.maintenanceBatch || Task.isCancelled { break }
        }
        // Whole transactions, oldest first: each step looks at the oldest `pruneWindow` rows (by the
        // primary key, no scan of the whole log) and deletes through the newest transaction among
        // them that started before the cutoff. (Numbers follow commit order and created_at the
        // start: a transaction that started after the cutoff but committed before an older one
        // may go a little early, which only makes a peer resume by a full sync.)
        while true {
            let through = try await conn.query("""
                SELECT max(txn) FROM (SELECT txn, created_at FROM change_log ORDER BY txn, seq LIMIT \(Int32(Self.pruneWindow))) oldest
                WHERE created_at < now() - make_interval(days => \(Int32(retention)))
                """)[0].decode(0, as: Int64?.self)
            guard var through else { break }
            if let floor { through = min(through, floor) }
            if through <= (report.prunedThrough ?? Int64.min) { break }
            let deleted = try await conn.query("DELETE FROM change_log WHERE txn <= \(through)").affectedRows ?? 0
            report.prunedChangeLogRows += deleted
            report.prunedThrough = through
            if deleted == 0 || Task.isCancelled { break }
        }
        return report
    }
}
