// A real BigPeer server in-process (its own PostgreSQL database, port 0, API-key auth) for the
// SmallPeer integration tests, a REST helper, and helpers to sync peers with it.
import Auth
import BigPeerServer
import BigPeerTestSupport
import Foundation
import HTTP
import Postgres
@testable import SmallPeer
import Testing
import Values

struct TestServer {
    let service: BigPeerService
    let key: String
    let http: HTTPClient
    var port: Int { service.port }
    var url: String { "ws://127.0.0.1:\(port)" }

    static let jwtSecret = Array("the SmallPeer tests' HS256 secret, 32+ bytes".utf8)

    /// A server on its own database (port 0 unless given) with API keys and HS256 JWTs.
    static func start(_ db: TestDatabase, port: Int = 0) async throws -> BigPeerService {
        var config = ServerConfiguration()
        config.port = port
        config.threads = 1
        config.database = .configuration(db.configuration)
        config.jwt = try JWTVerifier(secret: jwtSecret)
        return try await BigPeerService.start(config)
    }

    static func with(_ body: (TestServer) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await start(db)
            do {
                try await body(try await make(service))
            } catch {
                await service.stop()
                throw error
            }
            await service.stop()
        }
    }

    /// A handle on a running service, with a fresh API key that may read and write everything.
    static func make(_ service: BigPeerService) async throws -> TestServer {
        let now = APIKeyStore.now()
        let (_, token) = try await APIKeyStore(pool: service.pool).create(
            description: "smallpeer test", expiresAt: PostgresTimestamp(microsecondsSince1970: now.microsecondsSince1970 + 3_600_000_000),
            read: .all, write: .all)
        return TestServer(service: service, key: token.text, http: try HTTPClient())
    }

    /// A JWT for this server's secret with `read`/`write` claims.
    func jwt(read: Value, write: Value) throws -> String {
        let now = JWTVerifier.wallClockSeconds()
        return try JWTVerifier(secret: Self.jwtSecret).sign(claims: ["sub": "smallpeer-test", "exp": .int(now + 600), "read": read, "write": write])
    }

    /// `POST /api/v4/store/execute`; returns the response body.
    @discardableResult
    func execute(_ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        h.add("Authorization", "Bearer \(key)")
        let body = JSON.serialize(.object(["statement": .string(statement), "args": .object(args)]))
        let r = try await http.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(port)/api/v4/store/execute", headers: h, body: body))
        #expect(r.status.code == 200, "\(statement): \(String(decoding: r.body, as: UTF8.self))")
        return try JSON.parse(r.body)
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

/// Polls `condition` every 20 ms for up to 10 s.
func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record("timed out waiting for: \(what)")
}

/// The `bigpeer` binary built next to the test bundle.
func bigpeerBinary() throws -> String { try ServerProcess.locateBinary() }

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
