import BigPeerTestSupport
import Postgres
import Values
@testable import Store

/// A migrated database with a store on it, for one test.
func withStore(_ body: (DocumentStore, TestDatabase) async throws -> Void) async throws {
    try await TestPostgres.withDatabase { db in
        try await db.migrate()
        let store = try await DocumentStore.open(pool: db.makePool())
        try await body(store, db)
    }
}

extension DocumentStore {
    /// Executes and returns the items (test shorthand).
    func items(_ statement: String, _ args: [String: Value] = [:]) async throws -> [Value] {
        try await execute(statement, arguments: args).items
    }
}
