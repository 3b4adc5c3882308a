// What upstream replication (Sources/Upstream, docs/LOCAL-NODE.md) needs from the store: its row
// in `bigpeer_upstream` (migrations/0010), the upload backlog read from the change log in commit
// order, the download checkpoints, and the document hashes a resumed subscription lists in `have`.
// Downloads themselves are merged by `mergeDeltas(_:origin:checkpoints:)` (SyncStorage.swift):
// the same group-commit path as every write, with the checkpoints in the same transaction.

import CRDT
import DQL
import Postgres
import SyncProtocol
import Values

/// The replication state of one upstream as stored.
public struct UpstreamRecord: Sendable, Equatable {
    public var upstream: String
    public var upstreamSite: Int64?
    /// Everything up to here that must go up has been acknowledged by the upstream.
    public var uploaded: ChangeLogPosition
    /// Download checkpoints by subscription key.
    public var checkpoints: [String: Int64]
}

/// One change to upload: a change-log row with what to send for it.
public struct UploadRow: Sendable {
    public var position: ChangeLogPosition
    public var collection: String
    public var id: Value
    public var kind: String
    /// The logged delta, or (a creation logs none) the document's current state: merged
    /// upstream either way (a state is converted to a delta since nothing before sending).
    public var delta: [UInt8]?
    public var state: [UInt8]?
}

/// Download checkpoints to write with the data they cover (`mergeDeltas(_:origin:checkpoints:)`).
public struct DownloadCheckpoints: Sendable, Equatable {
    public var upstream: String
    /// Checkpoint by subscription key.
    public var checkpoints: [String: Int64]
    public init(upstream: String, checkpoints: [String: Int64]) {
        self.upstream = upstream
        self.checkpoints = checkpoints
    }
}

/// What is waiting to go up, for the status endpoint.
public struct UploadBacklog: Sendable, Equatable {
    /// At most `DocumentStore.backlogCountLimit + 1` (more: "over the limit").
    public var changes: Int
    /// When the oldest of them was committed (nil: none waiting).
    public var oldestAt: Double?
}

extension DocumentStore {
    /// This upstream's row, created on first use: a new upstream starts with everything in the
    /// change log still to upload.
    public func upstreamRecord(_ upstream: String) async throws(StoreError) -> UpstreamRecord {
        do {
            _ = try await pool.query("INSERT INTO bigpeer_upstream (upstream) VALUES (\(upstream)) ON CONFLICT DO NOTHING")
            let row = try await pool.query("SELECT upstream_site, uploaded_txn, uploaded_seq FROM bigpeer_upstream WHERE upstream = \(upstream)")[0]
            var checkpoints: [String: Int64] = [:]
            for r in try await pool.query("SELECT subscription, checkpoint FROM bigpeer_upstream_checkpoints WHERE upstream = \(upstream)") {
                checkpoints[try r.decode(0, as: String.self)] = try r.decode(1, as: Int64.self)
            }
            return UpstreamRecord(upstream: upstream, upstreamSite: try row.decode(0, as: Int64?.self),
                                  uploaded: ChangeLogPosition(txn: try row.decode(1, as: Int64.self), seq: try row.decode(2, as: Int32.self)),
                                  checkpoints: checkpoints)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Records the upstream's site id. A different one than before (another database answers at
    /// that URL) drops the download checkpoints — they are positions in the other one's log, and
    /// resuming with them could skip changes (CouchDB's mismatched-checkpoint lesson) — and
    /// starts the uploads again from the beginning of the change log: the new database has none
    /// of what the old one acknowledged. Returns whether the site id changed.
    public func recordUpstreamSite(_ upstream: String, site: Int64) async throws(StoreError) -> Bool {
        do {
            // One statement, so one transaction: the new site id never stands beside the old
            // database's checkpoints. (In SET, `upstream_site` is the old value.)
            let changed = try await pool.query("""
                WITH changed AS (
                  UPDATE bigpeer_upstream SET upstream_site = \(site), updated_at = now(),
                    uploaded_txn = CASE WHEN upstream_site IS NULL THEN uploaded_txn ELSE 0 END,
                    uploaded_seq = CASE WHEN upstream_site IS NULL THEN uploaded_seq ELSE -1 END
                  WHERE upstream = \(upstream) AND upstream_site IS DISTINCT FROM \(site) RETURNING upstream
                ), dropped AS (
                  DELETE FROM bigpeer_upstream_checkpoints WHERE upstream IN (SELECT upstream FROM changed)
                )
                SELECT count(*) FROM changed
                """)[0].decode(0, as: Int64.self) > 0
            return changed
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Moves the upload position forward (never back: two instances replicating at once only
    /// repeat uploads, which merge as no-ops upstream).
    public func saveUploadPosition(_ upstream: String, _ position: ChangeLogPosition, site: Int64? = nil) async throws(StoreError) {
        do {
            // With `site`: only while the row is still about that upstream database. A position
            // acknowledged by the previous database behind the URL, stored after `recordUpstreamSite`
            // reset the row for a new one, would skip changes the new one never received.
            _ = try await pool.query("""
                UPDATE bigpeer_upstream SET uploaded_txn = \(position.txn), uploaded_seq = \(position.seq), updated_at = now()
                WHERE upstream = \(upstream) AND (uploaded_txn, uploaded_seq) < (\(position.txn), \(position.seq))
                  AND (\(site)::bigint IS NULL OR upstream_site = \(site)::bigint)
                """)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The next changes to upload after `after`, in commit order: rows not from `excludingOrigin`
    /// (the upstream itself) and not evictions, at most `maxRows`, cut where their running size
    /// passes `maxBytes` (the first row always stays). `end` is where the next read starts: past
    /// every row looked at (so a long run of the upstream's own changes is skipped in pages too),
    /// and at the end of the newest transaction when the read reached it.
    public func readUploadBacklog(after: ChangeLogPosition, excludingOrigin: Int64, maxRows: Int, maxBytes: Int)
        async throws(StoreError) -> (rows: [UploadRow], end: ChangeLogPosition) {
        do {
            let fetch = Int64(max(1, maxRows))
            // Rows are looked at in (txn, seq) order up to the LIMIT; those from the upstream and
            // evictions count no bytes and are not returned, but still move `end`. The byte bound
            // is applied here, on sizes alone (`octet_length` of a stored state reads its length,
            // not the value), so only the states of the rows kept are read: a page of 250 KB
            // creations costs its ~4 MiB, not 2000 states. A creation's state (it logs no delta)
            // is looked up by primary key row by row: as a join, the planner hashed the whole
            // documents table for each read. The newest transaction comes from the same snapshot:
            // a read that looked at every row after `after` ends with it.
            var query: PostgresQuery = """
                SELECT (SELECT n FROM bigpeer_txn), k.txn, k.seq, k.collection, k.id, k.kind, k.delta,
                       CASE WHEN k.delta IS NULL AND NOT k.skip
                            THEN (SELECT d.state FROM documents d WHERE d.collection = k.collection AND d.id = k.id) END,
                       k.skip, k.looked
                FROM (SELECT 1) one LEFT JOIN (
                  SELECT w.* FROM (
                    SELECT r.*, sum(r.bytes) OVER (ORDER BY r.txn, r.seq) - r.bytes AS before, count(*) OVER () AS looked
                    FROM (
                      SELECT c.txn, c.seq, c.collection, c.id, c.kind, c.delta, s.skip,
                             CASE WHEN s.skip THEN 0
                                  WHEN c.delta IS NOT NULL THEN octet_length(c.delta)
                                  ELSE coalesce((SELECT octet_length(d.state) FROM documents d WHERE d.collection = c.collection AND d.id = c.id), 0)
                             END AS bytes
                      FROM (SELECT txn, seq, collection, id, kind, delta, origin FROM change_log
                            WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND txn <= (SELECT n FROM bigpeer_txn)
                            ORDER BY txn, seq LIMIT \(fetch)) c
                      CROSS JOIN LATERAL (SELECT c.kind = 'evict' OR c.origin IS NOT DISTINCT FROM \(excludingOrigin) AS skip) s
                    ) r
                  ) w WHERE w.before < \(Int64(max(1, maxBytes)))
                ) k ON true
                ORDER BY k.txn, k.seq
                """
            query.binaryResults = true
            let result = try await pool.query(query)
            var rows: [UploadRow] = []
            var end = after
            var kept = 0
            var looked: Int64 = 0
            let newest = try BinaryColumns.int64(result[0], column: 0)
            for row in result where !row.isNull(1) {
                kept += 1
                looked = try BinaryColumns.int64(row, column: 9)
                end = ChangeLogPosition(txn: try BinaryColumns.int64(row, column: 1), seq: try BinaryColumns.int32(row, column: 2))
                if try BinaryColumns.bool(row, column: 8) { continue }
                let delta: [UInt8]? = row.isNull(6) ? nil : try BinaryColumns.bytes(row, column: 6)
                let state: [UInt8]? = row.isNull(7) ? nil : try BinaryColumns.bytes(row, column: 7)
                // A creation of a document evicted or reaped since: nothing left to send.
                guard delta != nil || state != nil else { continue }
                rows.append(UploadRow(position: end, collection: try BinaryColumns.text(row, column: 3),
                                      id: try BinaryColumns.json(row, column: 4), kind: try BinaryColumns.text(row, column: 5),
                                      delta: delta, state: state))
            }
            // Every row after `after` up to the newest transaction was looked at and kept: the read covers it.
            if Int64(kept) == looked && looked < fetch { end = max(end, .end(of: newest)) }
            return (rows, end)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Whether the change log still holds every change after `position` (a first upload from
    /// `(0, -1)` included): if maintenance pruned part of it before any upstream row held it
    /// back, the documents themselves must be uploaded instead (`readDocumentsForUpload`).
    public func changeLogHolds(after position: ChangeLogPosition) async throws(StoreError) -> Bool {
        // The sync resume check (a position from before the first transaction is one at 0).
        try await changeLogReaches(back: max(0, position.completeThrough))
    }

    /// Documents (tombstones included) after `after` in (collection, id) order, with their
    /// states: at most `limit`, cut where their running size passes `maxBytes` (the first always
    /// stays); `snapshot` is the newest transaction the read saw (every change up to it is in
    /// these states).
    public func readDocumentsForUpload(after: (collection: String, id: Value)?, limit: Int, maxBytes: Int)
        async throws(StoreError) -> (documents: [StoredDocument], snapshot: Int64) {
        do {
            let bound = Int64(max(1, maxBytes)), rows = Int64(max(1, limit))
            let afterCollection = after?.collection ?? "", afterID = PostgresJSON(after.map { JSON.string($0.id) } ?? "null")
            var query: PostgresQuery = """
                SELECT (SELECT n FROM bigpeer_txn), d.collection, d.id, d.state
                FROM (SELECT 1) one LEFT JOIN (
                  SELECT w.* FROM (
                    SELECT p.*, sum(octet_length(p.state)) OVER (ORDER BY p.collection, p.id) - octet_length(p.state) AS before
                    FROM (SELECT collection, id, state FROM documents
                          WHERE \(after == nil) OR (collection, id) > (\(afterCollection), \(afterID)::jsonb)
                          ORDER BY collection, id LIMIT \(rows)) p
                  ) w WHERE w.before < \(bound)
                ) d ON true
                ORDER BY d.collection, d.id
                """
            query.binaryResults = true
            let result = try await pool.query(query)
            let snapshot = try BinaryColumns.int64(result[0], column: 0)
            var documents: [StoredDocument] = []
            for row in result where !row.isNull(1) {
                documents.append(StoredDocument(collection: try BinaryColumns.text(row, column: 1), id: try BinaryColumns.json(row, column: 2),
                                                state: try BinaryColumns.bytes(row, column: 3), value: nil))
            }
            return (documents, snapshot)
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The other configured upstreams this database has a row for (a URL no longer used still
    /// holds retention back: maintenance keeps what it has not acknowledged), with their
    /// positions. Rows of nodes found on the LAN are not listed: they expire by themselves.
    public func otherUpstreams(than upstream: String) async throws(StoreError) -> [(upstream: String, uploaded: ChangeLogPosition)] {
        do {
            return try await pool.query("""
                SELECT upstream, uploaded_txn, uploaded_seq FROM bigpeer_upstream
                WHERE upstream <> \(upstream) AND discovered_peer_key IS NULL ORDER BY upstream
                """).map { row in
                (try row.decode(0, as: String.self), ChangeLogPosition(txn: try row.decode(1, as: Int64.self), seq: try row.decode(2, as: Int32.self)))
            }
        } catch {
            throw StoreError.from(error)
        }
    }

    /// Most changes `uploadBacklog` counts exactly.    /// Most changes `uploadBacklog` counts exactly.
    public static let backlogCountLimit = 1_000_000

    /// How many changes wait to go up, and when the oldest was committed.
    public func uploadBacklog(after: ChangeLogPosition, excludingOrigin: Int64?) async throws(StoreError) -> UploadBacklog {
        do {
            // Before the first session the upstream's site id is unknown: every change counts.
            // Counted up to `countLimit` (a status request must not scan a week of writes); the
            // oldest is the first row after the position, found by the primary key.
            let limit = Int64(Self.backlogCountLimit) + 1
            let query: PostgresQuery = excludingOrigin.map { origin in """
                SELECT (SELECT count(*) FROM (SELECT 1 FROM change_log
                          WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND kind <> 'evict' AND origin IS DISTINCT FROM \(origin) LIMIT \(limit)) c),
                       (SELECT extract(epoch FROM created_at)::float8 FROM change_log
                          WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND kind <> 'evict' AND origin IS DISTINCT FROM \(origin)
                          ORDER BY txn, seq LIMIT 1)
                """ } ?? """
                SELECT (SELECT count(*) FROM (SELECT 1 FROM change_log
                          WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND kind <> 'evict' LIMIT \(limit)) c),
                       (SELECT extract(epoch FROM created_at)::float8 FROM change_log
                          WHERE (txn, seq) > (\(after.txn), \(after.seq)) AND kind <> 'evict' ORDER BY txn, seq LIMIT 1)
                """
            let row = try await pool.query(query)[0]
            return UploadBacklog(changes: Int(try row.decode(0, as: Int64.self)), oldestAt: try row.decode(1, as: Double?.self))
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The documents a resumed upstream subscription may list in `have` (PROTOCOL.md §4.3: held
    /// with every change up to its checkpoint): those that match it here now — a document that
    /// left the subscription, or that no subscription covered for a while, may lack changes the
    /// upstream made meanwhile, and unlisted it is sent whole if it matches again — and that
    /// nobody but the upstream changed here since `uploadedThrough` (a document created here and
    /// not uploaded yet must not be listed; one only updated here merely gets its next change as
    /// a full state). Nil when there are more than `limit` (the caller then resumes without
    /// `have`). Tombstones are not listed.
    public func heldDocumentIDs(matching statement: SelectStatement, arguments: [String: Value], uploadedThrough: Int64,
                                upstreamSite: Int64, limit: Int) async throws(StoreError) -> [Value]? {
        do {
            var scan = try await subscriptionScan(statement, arguments: arguments)
            let after = scan.bind(PostgresBind(type: PostgresType.int8, text: String(uploadedThrough)))
            let collection = scan.bind(PostgresBind(type: PostgresType.text, text: statement.from.name))
            let site = scan.bind(PostgresBind(type: PostgresType.int8, text: String(upstreamSite)))
            let rows = scan.bind(PostgresBind(type: PostgresType.int8, text: String(Int64(limit) + 1)))
            let sql = """
                SELECT id, \(scan.valueColumn) FROM documents
                WHERE (\(scan.conditions)) AND NOT deleted
                  AND (collection, id) NOT IN (SELECT c.collection, c.id FROM change_log c
                        WHERE c.txn > $\(after)::bigint AND c.collection = $\(collection)::text AND c.kind <> 'evict'
                          AND c.origin IS DISTINCT FROM $\(site)::bigint)
                LIMIT $\(rows)::bigint
                """
            let result = try await pool.query(PostgresQuery(unsafeSQL: sql, binds: scan.binds))
            if result.count > limit { return nil }
            var ids: [Value] = []
            ids.reserveCapacity(result.count)
            for row in result where try scan.residualMatches(row, valueColumn: 1) {
                ids.append(try Self.decodeJSON(row, column: 0))
            }
            return ids
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The documents a new subscription (no checkpoint) may list in `known` (PROTOCOL.md §4.3):
    /// those that match it here now, with the digest of their stored state (SyncProtocol's
    /// `StateDigest`: the first 8 bytes of SHA-256, big-endian, computed by PostgreSQL so that
    /// only 8 bytes a document leave the database). At most `limit` of
    /// them, in no particular order: any subset may be listed (the others are sent whole).
    /// Tombstones are not listed: an initial sync sends none.
    public func knownStates(matching statement: SelectStatement, arguments: [String: Value], limit: Int)
        async throws(StoreError) -> [(id: Value, digest: UInt64)] {
        do {
            var scan = try await subscriptionScan(statement, arguments: arguments)
            let rows = scan.bind(PostgresBind(type: PostgresType.int8, text: String(limit)))
            let sql = """
                SELECT id, \(scan.valueColumn), ('x' || encode(substring(sha256(state) from 1 for 8), 'hex'))::bit(64)::bigint FROM documents
                WHERE (\(scan.conditions)) AND NOT deleted
                LIMIT $\(rows)::bigint
                """
            let result = try await pool.query(PostgresQuery(unsafeSQL: sql, binds: scan.binds))
            var out: [(id: Value, digest: UInt64)] = []
            out.reserveCapacity(result.count)
            for row in result where try scan.residualMatches(row, valueColumn: 1) {
                // The 8 bytes as a bigint (text results), its bits reinterpreted unsigned.
                out.append((try Self.decodeJSON(row, column: 0), UInt64(bitPattern: try row.decode(2, as: Int64.self))))
            }
            return out
        } catch {
            throw StoreError.from(error)
        }
    }
}

extension WriteTransaction {
    /// Writes download checkpoints in this transaction (after the data they cover), if the
    /// upstream row still names `site` (the database the changes came from): checkpoints of a
    /// merge that commits after `recordUpstreamSite` switched the row to another database behind
    /// the URL are positions in the old one's log, and would make a resume skip changes. (FOR
    /// SHARE holds the row to COMMIT: a switch waits for this transaction, then drops what it wrote.)
    mutating func save(_ checkpoints: DownloadCheckpoints, site: Int64?) async throws {
        guard !checkpoints.checkpoints.isEmpty else { return }
        let keys = checkpoints.checkpoints.keys.sorted()
        let statement: PostgresQuery = """
            INSERT INTO bigpeer_upstream_checkpoints (upstream, subscription, checkpoint)
            SELECT \(checkpoints.upstream), s, c FROM unnest(\(PostgresArray(keys))::text[], \(PostgresArray(keys.map { checkpoints.checkpoints[$0] ?? 0 }))::int8[]) AS u(s, c)
            WHERE \(site)::bigint IS NULL
               OR EXISTS (SELECT 1 FROM bigpeer_upstream WHERE upstream = \(checkpoints.upstream) AND upstream_site = \(site)::bigint FOR SHARE)
            ON CONFLICT (upstream, subscription) DO UPDATE SET checkpoint = EXCLUDED.checkpoint, updated_at = now()
            """
        try await db.enqueue(statement)
    }
}
