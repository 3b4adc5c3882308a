import Foundation

/// One numbered schema change: `migrations/0001_initial.sql` is version 1, named `0001_initial.sql`.
public struct Migration: Sendable, Equatable {
    public var version: Int
    public var name: String
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// Reads every `NNNN_name.sql` file in `directory`, ordered by version. Other files are ignored;
    /// two files with one version number are refused.
    public static func load(directory: String) throws(PostgresError) -> [Migration] {
        let files: [String]
        do { files = try FileManager.default.contentsOfDirectory(atPath: directory) } catch {
            throw .migration("cannot read migrations directory \(directory): \(error.localizedDescription)")
        }
        var contents: [(name: String, sql: String)] = []
        for file in files.sorted() where file.hasSuffix(".sql") {
            guard let data = FileManager.default.contents(atPath: directory + "/" + file),
                  let sql = String(data: data, encoding: .utf8) else {
                throw .migration("cannot read \(file) as UTF-8 text")
            }
            contents.append((file, sql))
        }
        return try load(files: contents)
    }

    /// Migrations from `(file name, SQL)` pairs (a directory's files, or the ones compiled into
    /// the binary), ordered by version; names must be `NNNN_description.sql`, versions unique.
    public static func load(files: [(name: String, sql: String)]) throws(PostgresError) -> [Migration] {
        var out: [Migration] = []
        for (file, sql) in files {
            let digits = file.prefix { $0.isASCII && $0.isNumber }
            guard file.hasSuffix(".sql"), !digits.isEmpty, let version = Int(digits), file.dropFirst(digits.count).first == "_" else {
                throw .migration("\(file): migration files are named NNNN_description.sql")
            }
            if let other = out.first(where: { $0.version == version }) {
                throw .migration("\(file) and \(other.name) share version \(version)")
            }
            out.append(Migration(version: version, name: file, sql: sql))
        }
        return out.sorted { $0.version < $1.version }
    }
}

/// Applies migrations in order, each in its own transaction, recording `(version, name, checksum)`
/// in `schema_migrations`.
///
/// - Exactly once under concurrency: the whole run holds a session-level advisory lock, so a second
///   instance starting at the same moment waits, then finds everything applied.
/// - An applied migration whose file changed since (different SHA-256) is refused: schema history
///   must not be rewritten under a running database. Write a new migration instead.
/// - Migration files must not contain BEGIN/COMMIT: the runner wraps each one.
public enum PostgresMigrator {
    /// Arbitrary constant naming BigPeer's migration lock (pg_advisory_lock takes a bigint).
    static let lockKey: Int64 = 0x4269_6750_6565_7201

    public struct Report: Sendable, Equatable {
        public var applied: [String] = []
        public var alreadyApplied: [String] = []
        /// Versions recorded in the database that no file describes (a newer release ran here).
        public var unknownInDatabase: [Int] = []
    }

    public static func apply(_ migrations: [Migration], pool: PostgresPool) async throws -> Report {
        try await pool.withConnection { try await apply(migrations, on: $0) }
    }

    public static func apply(_ migrations: [Migration], on conn: PostgresConnection) async throws -> Report {
        _ = try await conn.query("SELECT pg_advisory_lock(\(lockKey))")
        do {
            let report = try await applyLocked(migrations, on: conn)
            _ = try await conn.query("SELECT pg_advisory_unlock(\(lockKey))")
            return report
        } catch {
            if !conn.isBroken { _ = try? await conn.query("SELECT pg_advisory_unlock(\(lockKey))") }
            throw error
        }
    }

    private static func applyLocked(_ migrations: [Migration], on conn: PostgresConnection) async throws -> Report {
        _ = try await conn.query("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())
            """)
        var recorded: [Int: (name: String, checksum: String)] = [:]
        for row in try await conn.query("SELECT version, name, checksum FROM schema_migrations") {
            recorded[try row.decode(0, as: Int.self)] = (try row.decode(1), try row.decode(2))
        }
        var report = Report()
        let known = Set(migrations.map(\.version))
        report.unknownInDatabase = recorded.keys.filter { !known.contains($0) }.sorted()
        for m in migrations {
            let checksum = try await conn.query("SELECT encode(sha256(convert_to(\(m.sql), 'UTF8')), 'hex')")[0].decode(0, as: String.self)
            if let done = recorded[m.version] {
                guard done.checksum == checksum else {
                    throw PostgresError.migration(
                        "\(m.name) was changed after it was applied (recorded checksum \(done.checksum.prefix(12))…, file has \(checksum.prefix(12))…); "
                            + "restore the original file and add a new migration for the change")
                }
                report.alreadyApplied.append(m.name)
                continue
            }
            do {
                try await conn.transaction { c in
                    _ = try await c.simpleQuery(unsafeSQL: m.sql)
                    _ = try await c.query("INSERT INTO schema_migrations (version, name, checksum) VALUES (\(m.version), \(m.name), \(checksum))")
                }
            } catch let e as PostgresError {
                throw PostgresError.migration("\(m.name): \(e.debugDescription)")
            }
            report.applied.append(m.name)
        }
        return report
    }
}
