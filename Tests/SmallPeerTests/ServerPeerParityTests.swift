// The same write statements on a small peer and on the server (over REST, so through
// DocumentStore): both executors apply DQL/DocumentMutations.swift, and this is where a drift
// between them would show — in what a statement reports (mutated ids, warnings, or its error) and
// in what the collection holds afterwards.
import HTTP
@testable import SmallPeer
import Testing
import Values

@Suite("Server and small peer run writes alike")
struct ServerPeerParityTests {
    /// What one statement reported, in the server's terms (the peer's error kinds as HTTP statuses).
    struct Outcome: Equatable, CustomStringConvertible {
        var status = 200
        var mutated: [Value] = []
        var warnings: [String] = []
        var error: String? = nil

        var description: String { error.map { "\(status) \($0)" } ?? "mutated \(JSON.string(.array(mutated))), warnings \(warnings)" }
    }

    static let big = Value.string(String(repeating: "x", count: 300_000))
    static let tooBig = Value.string(String(repeating: "x", count: 6_000_000))

    /// Run in order on both sides; each reads what the ones before it wrote.
    static let statements: [(String, [String: Value])] = [
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red', 'n': 1}), ({'_id': 'b', 'color': 'blue', 'n': 2})", [:]),
        // FAIL (the default) on an existing document.
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'})", [:]),
        // An `_id` twice in the statement and one that exists: the error names the one that exists.
        ("INSERT INTO cars DOCUMENTS ({'_id': 'c'}), ({'_id': 'c', 'x': 1}), ({'_id': 'b'})", [:]),
        // The same `_id` twice and nothing existing: the second is the conflict.
        ("INSERT INTO cars DOCUMENTS ({'_id': 'c'}), ({'_id': 'c', 'x': 1})", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'green'}), ({'_id': 'c', 'n': 3}) ON ID CONFLICT DO NOTHING", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red'}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'n': 1.0}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'red'}) ON ID CONFLICT DO UPDATE", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'e', 'v': 1}), ({'_id': 'e', 'v': 2}) ON ID CONFLICT DO UPDATE_LOCAL_DIFF", [:]),
        ("INSERT INTO COLLECTION cars (specs MAP) INITIAL DOCUMENTS ({'_id': 'a', 'color': 'grey', 'specs': {'hp': 1}}), ({'_id': 'd', 'color': 'grey'})", [:]),
        ("INSERT INTO COLLECTION cars (n COUNTER) DOCUMENTS ({'_id': 'f', 'n': 'many'})", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'g', 'blob': :b})", ["b": big]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'h', 'blob': :b})", ["b": tooBig]),
        ("UPDATE cars SET color = :c, n = n + 10 WHERE color = 'blue'", ["c": "black"]),
        ("UPDATE COLLECTION cars (specs MAP, hits COUNTER) APPLY hits INCREMENT BY 2 SET specs.hp = 150, specs.kw = specs.hp UNSET v WHERE _id IN ('a', 'e')", [:]),
        ("UPDATE cars APPLY hits RESTART WITH 7 SET color = color ORDER BY _id DESC LIMIT 2", [:]),
        ("UPDATE cars SET color = color WHERE _id = 'b'", [:]),
        ("UPDATE cars SET gone = nope WHERE _id = 'b'", [:]),
        ("UPDATE cars APPLY hits INCREMENT BY 'x' WHERE _id = 'a'", [:]),
        ("UPDATE cars SET specs.hp = 1 WHERE _id = 'a'", [:]),
        ("UPDATE COLLECTION cars (color COUNTER) APPLY color INCREMENT BY 1 WHERE _id = 'a'", [:]),
        ("UPDATE cars SET blob = :b WHERE _id = 'b'", ["b": big]),
        ("UPDATE cars SET blob = :b WHERE _id = 'b'", ["b": tooBig]),
        ("DELETE FROM cars WHERE _id = 'a' OR color = 'grey'", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'a', 'color': 'white'})", [:]),
        ("INSERT INTO cars INITIAL DOCUMENTS ({'_id': 'd', 'color': 'grey'})", [:]),
        ("INSERT INTO cars DOCUMENTS ({'_id': 'd', 'color': 'blue'}) ON ID CONFLICT DO NOTHING", [:]),
        ("EVICT FROM cars WHERE n > 10", [:]),
        ("UPDATE cars SET n = 0 WHERE _id = 'b'", [:]),
    ]

    @Test func writeStatements_reportAndLeaveTheSame() async throws {
        let dir = TempDirectory()
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        defer { peer.close() }
        try await TestServer.with { server in
            for (statement, args) in Self.statements {
                let onServer = try await Self.run(statement, args, on: server)
                let onPeer = Self.run(statement, args, on: peer)
                #expect(onPeer == onServer, "\(statement)")
                let all = "SELECT * FROM cars ORDER BY _id"
                let serverRows = try await Self.run(all, [:], on: server, items: true)
                let peerRows = try peer.execute(all).items
                #expect(peerRows == serverRows, "after \(statement)")
            }
        }
    }

    static func run(_ statement: String, _ args: [String: Value], on peer: SmallPeer) -> Outcome {
        do {
            let r = try peer.execute(statement, arguments: args)
            return Outcome(mutated: r.mutatedDocumentIDs, warnings: r.warnings)
        } catch {
            let status = switch error {
            case .conflict: 409
            case .tooLarge: 413
            case .syntax, .invalid, .unsupported: 400
            case .storage, .closed: 500
            }
            return Outcome(status: status, error: error.description)
        }
    }

    static func run(_ statement: String, _ args: [String: Value], on server: TestServer) async throws -> Outcome {
        let body = try await execute(statement, args, on: server)
        guard body.status == 200 else {
            let error = body.json["error"]
            return Outcome(status: body.status, error: (error?["description"] ?? error?["message"])?.stringValue ?? "\(body.json)")
        }
        guard case .array(let mutated)? = body.json["mutatedDocumentIds"], case .array(let warnings)? = body.json["warnings"] else {
            throw TestFailure("unexpected response to \(statement): \(body.json)")
        }
        // A warning is `{"description": "..."}` on the wire.
        return Outcome(mutated: mutated, warnings: warnings.map { $0["description"]?.stringValue ?? "\($0)" })
    }

    static func run(_ statement: String, _ args: [String: Value], on server: TestServer, items: Bool) async throws -> [Value] {
        let body = try await execute(statement, args, on: server)
        guard body.status == 200, case .array(let items)? = body.json["items"] else { throw TestFailure("\(statement): \(body.json)") }
        return items
    }

    /// `POST /api/v4/store/execute`, whatever its status.
    static func execute(_ statement: String, _ args: [String: Value], on server: TestServer) async throws -> (status: Int, json: Value) {
        var h = HTTPHeaders()
        h.add("Content-Type", "application/json")
        h.add("Authorization", "Bearer \(server.key)")
        let body = JSON.serialize(.object(["statement": .string(statement), "args": .object(args)]))
        let r = try await server.http.execute(HTTPClientRequest(method: .POST, url: "http://127.0.0.1:\(server.port)/api/v4/store/execute",
                                                                 headers: h, body: body))
        return (Int(r.status.code), try JSON.parse(r.body))
    }
}
