import Auth
import BigPeerServer
import BigPeerTestSupport
import Foundation
import HTTP
import Postgres
import Values

/// A running BigPeer on its own database, an HTTP client, and the key table, for one test.
struct TestServer {
    let service: BigPeerService
    let client: HTTPClient
    let keys: APIKeyStore
    let db: TestDatabase
    var base: String { "http://127.0.0.1:\(service.port)" }

    struct Reply {
        var status: Int
        var headers: HTTPHeaders
        var raw: [UInt8]
        var body: Value
        var description: String? {
            guard case .object(let o) = body, case .object(let e)? = o["error"], case .string(let d)? = e["description"] else { return nil }
            return d
        }
        subscript(_ key: String) -> Value? {
            guard case .object(let o) = body else { return nil }
            return o[key]
        }
    }

    /// A new key (the text to send); `expiresIn` may be negative for an already expired key.
    func key(read: CollectionScope = .all, write: CollectionScope = .all, expiresInSeconds: Int64 = 3600) async throws -> String {
        let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + expiresInSeconds * 1_000_000)
        return try await keys.create(description: "test", expiresAt: expires, read: read, write: write).1.text
    }

    /// POSTs `body` as JSON (or raw bytes) with the key as a bearer token.
    func post(_ path: String, _ body: Value, key: String?, headers: HTTPHeaders = HTTPHeaders()) async throws -> Reply {
        try await post(path, raw: JSON.serialize(body), key: key, headers: headers)
    }

    func post(_ path: String, raw: [UInt8], key: String?, headers: HTTPHeaders = HTTPHeaders()) async throws -> Reply {
        var h = headers
        if let key { h.add("Authorization", "Bearer \(key)") }
        if !h.contains("Content-Type") { h.add("Content-Type", "application/json") }
        let r = try await client.execute(HTTPClientRequest(method: .POST, url: base + path, headers: h, body: raw))
        let value: Value
        if r.headers["Content-Type"] == "application/cbor" {
            value = try CBORValueCodec.decode(r.body)
        } else {
            value = (try? JSON.parse(r.body)) ?? .string(r.text)
        }
        return Reply(status: r.status.code, headers: r.headers, raw: r.body, body: value)
    }

    func execute(_ statement: String, _ args: [String: Value] = [:], key: String?) async throws -> Reply {
        try await post("/api/v4/store/execute", ["statement": .string(statement), "args": .object(args)], key: key)
    }
}

func withServer(_ configure: (inout ServerConfiguration) -> Void = { _ in }, _ body: (TestServer) async throws -> Void) async throws {
    try await TestPostgres.withDatabase { db in
        var config = ServerConfiguration()
        config.port = 0
        config.threads = 1
        config.databaseConnections = 4
        config.database = .configuration(db.configuration)
        configure(&config)
        let service = try await BigPeerService.start(config)
        let client = try HTTPClient()
        let server = TestServer(service: service, client: client, keys: APIKeyStore(pool: service.pool), db: db)
        do {
            try await body(server)
        } catch {
            await client.shutdown()
            await service.stop()
            throw error
        }
        await client.shutdown()
        await service.stop()
    }
}

/// The `bigpeer` executable next to the test bundle (SwiftPM builds it with the tests).
func bigpeerExecutable() throws -> String {
    var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent("bigpeer").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    throw TestFailure("the bigpeer executable was not found next to the test bundle (\(CommandLine.arguments[0])); run `swift build --build-tests` first")
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Runs a program to completion; returns exit status and output (signal-safe: see TestCommand).
func runProcess(_ path: String, _ args: [String], environment: [String: String]? = nil) async throws -> (status: Int32, out: String, err: String) {
    let r = try await TestCommand.run(path, args, environment: environment)
    return (r.status, r.out, r.err)
}

/// libpq keyword/value connection string for a test database (for the CLI's --database-url).
func conninfo(_ c: PostgresConfiguration) -> String {
    c.parameters.map { "\($0.key)='\($0.value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'"))'" }
        .joined(separator: " ")
}
