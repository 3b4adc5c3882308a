// Migrations: BigPeer's database schema as the binary carries it — the repository's migrations/
// (docs/STORAGE.md), and where a server takes them from. A module of its own so that whatever
// needs a BigPeer database (the server, the test harness) gets the schema without the server.

import Foundation
import Postgres

/// The migrations a database is brought to. By default those built into this binary
/// (`EmbeddedMigrations`, generated from the repository's migrations/ by
/// scripts/embed-resources.py), so a copied binary needs no files beside it. A directory given
/// with `--migrations-dir`, else in `BIGPEER_MIGRATIONS`, replaces them (writing a new migration
/// without rebuilding; running an older release's set for a comparison). Nothing is searched for.
public enum MigrationSet {
    public static let environmentVariable = "BIGPEER_MIGRATIONS"
    /// `origin` of the built-in set.
    public static let builtIn = "built-in"

    /// The migrations built into this binary.
    public static func embedded() throws(PostgresError) -> [Migration] {
        try Migration.load(files: EmbeddedMigrations.files)
    }

    /// The explicit directory's migrations (`directory`, else the environment variable), or the
    /// built-in ones; `origin` says which.
    public static func resolve(directory: String?) throws(PostgresError) -> (migrations: [Migration], origin: String) {
        let env = ProcessInfo.processInfo.environment[environmentVariable].flatMap { $0.isEmpty ? nil : $0 }
        guard let dir = directory ?? env else { return (try embedded(), builtIn) }
        let migrations = try Migration.load(directory: dir)
        if migrations.isEmpty { throw .migration("no NNNN_name.sql migrations in \(dir)") }
        return (migrations, dir)
    }
}
