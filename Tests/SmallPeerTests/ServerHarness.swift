// A real BigPeer server in-process (its own PostgreSQL database, port 0, API-key auth) for the
// SmallPeer integration tests, a REST helper, and helpers to sync peers with it.
import Auth
import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import Foundation
import HTTP
import Postgres
@testable import SmallPeer
import Testing
import Values

struct TestServer {
    let server: InProcessServer
    /// An API key that may read and write everything.
    let key: String
    var service: BigPeerService { server.service }
    var http: HTTPClient { server.http }
    var port: Int { server.port }
    var url: String { "ws://127.0.0.1:\(port)" }

    static let jwtSecret = Array("the SmallPeer tests' HS256 secret, 32+ bytes".utf8)

    /// A server on `db` (port 0 unless given) with API keys and HS256 JWTs, and `key` (a new
    /// read-write key unless given: a restarted server keeps the key its clients use).
    static func start(_ db: TestDatabase, port: Int = 0, key: String? = nil) async throws -> TestServer {
        let server = try await InProcessServer.start(on: db) { config in
            config.port = port
            config.jwt = try JWTVerifier(secret: jwtSecret)
        }
        do {
            let key = if let key { key } else { try await server.newKey() }
            return TestServer(server: server, key: key)
        } catch {
            await server.stop()
            throw error
        }
    }

    static func with(_ body: (TestServer) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            let server = try await start(db)
            try await afterwards({ await server.stop() }) { try await body(server) }
        }
    }

    func stop() async { await server.stop() }

    /// A JWT for this server's secret with `read`/`write` claims.
    func jwt(read: Value, write: Value) throws -> String {
        let now = JWTVerifier.wallClockSeconds()
        return try JWTVerifier(secret: Self.jwtSecret).sign(claims: ["sub": "smallpeer-test", "exp": .int(now + 600), "read": read, "write": write])
    }

    /// `POST /api/v4/store/execute`, which must succeed; returns the response body.
    @discardableResult
    func execute(_ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        try await server.rest(key: key).executeOK(statement, args)
    }

    /// Items of a REST SELECT.
    func items(_ statement: String) async throws -> [Value] {
        guard case .array(let items)? = try await execute(statement)["items"] else { return [] }
        return items
    }

    func client(_ peer: SmallPeer, key: String? = nil, jwt: String? = nil) throws -> SyncClient {
        var c = SyncClient.Configuration(url: url, apiKey: jwt == nil ? key ?? self.key : nil)
        c.jwt = jwt
        c.quietMillis = 400
        c.reconnectBase = .milliseconds(50)
        return try SyncClient(peer: peer, configuration: c)
    }

    /// Connects `peer`, waits until caught up, disconnects; returns the client's final status.
    @discardableResult
    func syncOnce(_ peer: SmallPeer) async throws -> SyncClient.Status {
        let client = try client(peer)
        do {
            try await client.waitUntilCaughtUp(timeout: .seconds(20))
        } catch {
            await client.stop()
            throw error
        }
        let status = client.status
        await client.stop()
        return status
    }
}

/// The `bigpeer` binary built next to the test bundle.
func bigpeerBinary() throws -> String { try ServerProcess.locateBinary() }

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
