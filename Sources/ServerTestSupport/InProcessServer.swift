import Auth
import BigPeerServer
import BigPeerTestSupport
import HTTP
import Postgres
import Values

/// A BigPeer server running in the test process on a test database (any free port, one event-loop
/// thread), with an HTTP client for it. `with` gives a test one on a database of its own and stops
/// both afterwards, whether the test returned or threw.
public struct InProcessServer: Sendable {
    public let service: BigPeerService
    public let http: HTTPClient
    public let database: TestDatabase

    public var port: Int { service.port }
    public var base: String { "http://127.0.0.1:\(port)" }
    /// The API key table of the server's database.
    public var keys: APIKeyStore { APIKeyStore(pool: service.pool) }

    /// The configuration every test server starts from: any free port, one loop, `db`.
    public static func configuration(_ db: TestDatabase) -> ServerConfiguration { configuration(db.configuration) }

    /// The same on any PostgreSQL (a cluster of the test's own).
    public static func configuration(_ postgres: PostgresConfiguration) -> ServerConfiguration {
        var config = ServerConfiguration()
        config.port = 0
        config.threads = 1
        config.database = .configuration(postgres)
        return config
    }

    /// Starts a server on `db` (`configuration(db)` changed by `configure`) and an HTTP client.
    public static func start(on db: TestDatabase, http: HTTPClient.Configuration = HTTPClient.Configuration(),
                             _ configure: (inout ServerConfiguration) throws -> Void = { _ in }) async throws -> InProcessServer {
        var config = configuration(db)
        try configure(&config)
        let service = try await BigPeerService.start(config)
        let client: HTTPClient
        do {
            client = try HTTPClient(configuration: http)
        } catch {
            await service.stop()
            throw error
        }
        return InProcessServer(service: service, http: client, database: db)
    }

    /// Runs `body` with a server on a fresh database; stops it afterwards.
    public static func with<R>(http: HTTPClient.Configuration = HTTPClient.Configuration(),
                               _ configure: (inout ServerConfiguration) throws -> Void = { _ in },
                               _ body: (InProcessServer) async throws -> R) async throws -> R {
        try await TestPostgres.withDatabase { db in
            let server = try await start(on: db, http: http, configure)
            return try await afterwards({ await server.stop() }) { try await body(server) }
        }
    }

    /// Shuts the client down and stops the server.
    public func stop() async {
        await http.shutdown()
        await service.stop()
    }

    /// The REST API as `key` (none: unauthenticated, or `--insecure-dev`).
    public func rest(key: String? = nil) -> RESTClient { RESTClient(http: http, port: port, key: key) }

    /// A new API key (its text, to send as a bearer token); `expiresInSeconds` may be negative for
    /// a key that has already expired.
    public func newKey(read: CollectionScope = .all, write: CollectionScope = .all, expiresInSeconds: Int64 = 3600) async throws -> String {
        let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + expiresInSeconds * 1_000_000)
        return try await keys.create(description: "test", expiresAt: expires, read: read, write: write).1.text
    }

    /// POSTs `body` as JSON with `key` as the bearer token.
    public func post(_ path: String, _ body: Value, key: String?, headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        try await rest(key: key).post(path, body, headers: headers)
    }

    public func post(_ path: String, raw: [UInt8], key: String?, headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        try await rest(key: key).post(path, raw: raw, headers: headers)
    }

    /// `POST /api/v4/store/execute` as `key`.
    public func execute(_ statement: String, _ args: [String: Value] = [:], key: String?) async throws -> RESTReply {
        try await rest(key: key).execute(statement, args)
    }
}
