import BigPeerTestSupport
import Foundation
import HTTP
import Testing
import Values

/// Real `bigpeer serve` processes, each on its own database of the test cluster: a cloud and the
/// local nodes replicating with it (`--upstream`).
struct Server {
    let process: ServerProcess
    let databaseURL: String
    let upstreamPort: Int?
    let subscriptions: [String]
    let extra: [String]
    let rest: RESTClient

    var port: Int { process.port }
    var syncURL: String { "ws://127.0.0.1:\(port)/api/v4/sync" }

    /// Starts a server on `databaseURL` (on `port` when given: a restart keeps its address),
    /// replicating with the server at `upstreamPort` when given.
    static func start(_ databaseURL: String, upstreamPort: Int? = nil, subscribe: [String] = [], extra: [String] = [],
                      port: Int? = nil, http: HTTPClient, processes: Processes, secure: Bool = false) async throws -> Server {
        var args = ["--database-url", databaseURL, "--log-level", "notice"] + (secure ? [] : ["--insecure-dev"])
        if let upstreamPort {
            args += ["--upstream", "ws://127.0.0.1:\(upstreamPort)/api/v4/sync", "--upstream-retry-max", "1"]
            for q in subscribe { args += ["--upstream-subscribe", q] }
        }
        let process = try await ServerProcess.start(arguments: args + extra, port: port)
        processes.add(process)
        return Server(process: process, databaseURL: databaseURL, upstreamPort: upstreamPort, subscriptions: subscribe, extra: extra,
                      rest: RESTClient(http: http, port: process.port))
    }

    /// The same server again, on the same port and database (after `stop` or `kill`).
    func restart(http: HTTPClient, processes: Processes) async throws -> Server {
        try await Server.start(databaseURL, upstreamPort: upstreamPort, subscribe: subscriptions, extra: extra, port: port, http: http, processes: processes)
    }

    func stop() async { await process.terminate() }
    func kill() async { await process.kill() }

    /// Every document of `collection`, by `_id`.
    func documents(_ collection: String) async throws -> [Value] {
        let r = try await rest.execute("SELECT * FROM \(collection) ORDER BY _id")
        guard r.status == 200 else { throw HarnessError.failed("SELECT on \(port): \(r.status) \(r.text)") }
        return r.body["items"]?.arrayValue ?? []
    }

    /// How many live documents `collection` holds.
    func count(_ collection: String) async throws -> Int64 {
        try await execute("SELECT count(*) AS n FROM \(collection)")["items"]?.arrayValue?.first?["n"]?.int64Value ?? -1
    }

    /// The newest transaction this server has committed.
    func newestTransaction() async throws -> Int64 {
        let r = try await rest.execute("SELECT * FROM harness_probe WHERE _id = 'none'")
        return r.body["transactionId"]?.int64Value ?? -1
    }

    /// `GET /api/v4/upstream`.
    func upstreamStatus() async throws -> Value {
        try await rest.get("/api/v4/upstream").body
    }

    @discardableResult
    func execute(_ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        let r = try await rest.execute(statement, args)
        guard r.status == 200 else { throw HarnessError.failed("\(statement) on \(port): \(r.status) \(r.text)") }
        return r.body
    }
}

enum HarnessError: Error, CustomStringConvertible {
    case failed(String)
    var description: String { switch self { case .failed(let s): s } }
}

/// Whether every server holds the same documents in `collection` (and at least `minimum`).
func converged(_ servers: [Server], _ collection: String, minimum: Int = 0) async -> Bool {
    var first: [Value]?
    for s in servers {
        guard let docs = try? await s.documents(collection), docs.count >= minimum else { return false }
        if let first, first != docs { return false }
        first = docs
    }
    return true
}

/// The processes a test started, so that every one is gone when the test ends, passed or not.
final class Processes: Sendable {
    private let started = MutexBox<[ServerProcess]>([])
    func add(_ p: ServerProcess) { started.withLock { $0.append(p) } }
    func killAll() async { for p in started.withLock({ $0 }) { await p.kill() } }
}

/// Runs `body` with `count` databases of the test cluster, one HTTP client, and the set of
/// processes to kill at the end.
func withDatabases(_ count: Int, _ body: ([String], HTTPClient, Processes) async throws -> Void) async throws {
    func nest(_ urls: [String]) async throws {
        if urls.count == count {
            let http = try HTTPClient()
            let processes = Processes()
            do { try await body(urls, http, processes) } catch {
                await processes.killAll()
                await http.shutdown()
                throw error
            }
            await processes.killAll()
            await http.shutdown()
            return
        }
        try await TestPostgres.withDatabase { db in try await nest(urls + [db.url]) }
    }
    try await nest([])
}

/// A new API key with `scopes` (`bigpeer keys create` flags) in the database at `databaseURL`.
func createAPIKey(_ databaseURL: String, _ scopes: [String], description: String = "test") async throws -> String {
    let created = try await TestCommand.run(try ServerProcess.locateBinary(),
                                            ["keys", "create", "--description", description, "--expires-in", "1d", "--database-url", databaseURL] + scopes)
    #expect(created.status == 0, "\(created.err)")
    return String(try #require(created.out.split(separator: "\n").last))
}
