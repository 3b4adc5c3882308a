import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Postgres
import Values

/// The in-process server these tests run against (the shared harness; `withServer` below).
typealias TestServer = InProcessServer

extension RESTReply {
    /// The error body's text (`{"error":{"description":…}}`), nil on any other body.
    var description: String? {
        guard case .object(let e)? = self["error"], case .string(let d)? = e["description"] else { return nil }
        return d
    }
}

/// A server with API-key auth on its own database (four database sessions), for one test.
func withServer(_ configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (TestServer) async throws -> Void) async throws {
    try await InProcessServer.with({ config in
        config.databaseConnections = 4
        configure(&config)
    }, body)
}

/// libpq keyword/value connection string for a test database (for the CLI's --database-url).
func conninfo(_ c: PostgresConfiguration) -> String {
    c.parameters.map { "\($0.key)='\($0.value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'"))'" }
        .joined(separator: " ")
}
