// `POST /api/v4/sync/remote_execute`: a SELECT run on the connected peers a condition picks
// (docs/API.md, "Remote execution"; PROTOCOL.md §4.15), answered in Ditto's shape:
//
//     request:  {"statement": "SYNC CONTEXT (PEERS WHERE peerKey = :pk) SELECT * FROM cars", "args": {"pk": "pk..."}}
//     response: {"result": [{"peer": "pk...", "deviceName": "...", "items": [...], "error": null,
//                            "warnings": [], "totalWarningsCount": 0, "elapsedMilliseconds": 12}, ...]}
//
// One result per matching peer whose session is open on this instance, in peer-key order; a peer
// that refuses, cannot answer, or does not answer within `timeout` has an `error`
// ({"code", "description"}) and no items. No matching peer: an empty list. The PEERS condition
// sees each peer as a document of its presence fields (`peerDocument`).
//
// Who may: a key that may read every collection (as `/api/v4/presence`): the query reads the
// peers' stores, whatever their collections, and the answer names the connected peers.
//
// Memory: every peer's answer is bounded before it is decoded (the query's `max`), and the bounds
// of one request add up to at most `maxResponseBytes`: with many peers each may send less.

import Auth
import DQL
import HTTP
import Logging
import Sync
import SyncProtocol
import Values

struct RemoteExecuteRoute {
    static let path = "/api/v4/sync/remote_execute"

    let registry: SyncSessionRegistry
    let presence: PresenceHub
    let auth: Authenticator
    /// How long the peers have to answer (`--remote-query-timeout`).
    let timeout: Duration
    let logger: Logger

    /// Largest answer accepted from one peer, and from all the peers of one request together.
    static let maxPeerResultBytes: UInt64 = 4 << 20
    static let maxResponseBytes: UInt64 = 16 << 20
    /// Steps the PEERS condition may take over all the connected peers together.
    static let peersConditionSteps = 10_000_000

    func register(on router: inout HTTPRouter) {
        let route = self
        router.post(Self.path, .respond { request in await route.execute(request) })
    }

    func execute(_ request: HTTPRequest) async -> HTTPResponse {
        let principal: Principal
        switch await PresenceRoute.readAllPrincipal(request, auth: auth, logger: logger) {
        case .success(let p): principal = p
        case .failure(let refused): return refused.response
        }
        func refuse(_ description: String) -> HTTPResponse {
            APIError(.badRequest, description).response(to: request, logger: logger, negotiated: false)
        }
        let body: Value
        switch await APIEncoding.decodeBodyOffLoopIfLarge(request) {
        case .success(let v): body = v
        case .failure(let why): return why.response(to: request, logger: logger, negotiated: false)
        }
        let text: String, arguments: [String: Value]
        switch StoreRoutes.statementAndArguments(body) {
        case .success(let r): (text, arguments) = r
        case .failure(let why): return why.response(to: request, logger: logger, negotiated: false)
        }
        let statement: SyncContextStatement
        do { statement = try DQL.parseSyncContext(text) } catch {
            return refuse("DQL syntax error at \(error)")
        }
        // The SELECT is checked here too, so a statement every peer would refuse is a 400, not N errors.
        do { _ = try SelectQuery(statement.select, context: EvaluationContext(arguments: arguments)) } catch {
            return refuse("\(error)")
        }
        let targets: [(document: Value, connection: SyncConnection)]
        // Inline within a loop's slice, else on the evaluation threads: a costly condition over
        // many peers must not hold the request's loop (docs/ARCHITECTURE.md, "In-memory evaluation").
        do {
            let route = self, condition = statement.peers
            targets = try await InMemoryEvaluation.run(deadline: .now + .seconds(5), maxSteps: Self.peersConditionSteps) { budget in
                try route.matchingPeers(condition, arguments: arguments, budget: budget)
            }
        } catch {
            return refuse("PEERS WHERE: \(error)")
        }
        // The caller's read rules go with the SELECT: each peer runs it over its own store with them.
        let select = Printer.print(.select(principal.readRules.restricting(statement.select))), bound = arguments
        let perPeer = max(RemoteQuery.minResultBytes, min(Self.maxPeerResultBytes, Self.maxResponseBytes / UInt64(max(1, targets.count))))
        let millis = UInt64(max(1, timeout / .milliseconds(1)))
        let answers = await withTaskGroup(of: (Int, RemoteQueryResult).self) { group in
            for (i, target) in targets.enumerated() {
                group.addTask {
                    (i, await target.connection.remoteQuery(select, arguments: bound, timeoutMillis: millis, maxResultBytes: perPeer))
                }
            }
            var out: [(Int, RemoteQueryResult)] = []
            for await answer in group { out.append(answer) }
            return out.sorted { $0.0 < $1.0 }.map(\.1)
        }
        let results: [Value] = zip(targets, answers).map { Self.resultObject(peer: $0.document, $1) }
        return .json(JSON.serialize(.object(["result": .array(results)])))
    }

    /// The open sessions whose peers match `condition` (all without one), in peer-key order.
    func matchingPeers(_ condition: Expression?, arguments: [String: Value], budget: EvaluationBudget) throws(DQLEvaluationError)
        -> [(document: Value, connection: SyncConnection)] {
        let graph = presence.graph
        var known: [String: PresenceGraph.Peer] = [:]
        for p in graph.remotePeers { known[p.peerKey] = p }
        let evaluator = Evaluator(context: EvaluationContext(arguments: arguments, budget: budget))
        // Once against a peer with empty fields, so a condition that cannot be evaluated (a missing
        // argument, an unknown function) is refused even when no peer is connected.
        if let condition { _ = try evaluator.evaluate(condition, in: Self.emptyPeer) }
        var out: [(document: Value, connection: SyncConnection, key: String)] = []
        for connection in registry.admittedConnections() {
            guard let hello = connection.inspect({ $0.state == .ready ? $0.peer : nil }) else { continue }
            let key = PresenceGraph.keyString(hello.peerKey)
            let document = Self.peerDocument(hello, presence: known[key])
            if let condition, try evaluator.evaluate(condition, in: document) != .bool(true) { continue }
            out.append((document, connection, key))
        }
        return out.sorted { $0.key < $1.key }.map { ($0.document, $0.connection) }
    }

    /// What PEERS WHERE sees of a peer: its presence record's fields when it publishes one (as
    /// `GET /api/v4/presence` shows them), else what its `hello` said.
    static func peerDocument(_ hello: Hello, presence: PresenceGraph.Peer?) -> Value {
        .object([
            "peerKey": .string(PresenceGraph.keyString(hello.peerKey)),
            "deviceName": .string(presence?.deviceName ?? hello.deviceName),
            "os": .string(presence?.os ?? ""),
            "sdkVersion": .string(presence?.sdkVersion ?? ""),
            "peerMetadata": .object(presence?.metadata ?? hello.metadata),
        ])
    }

    static let emptyPeer = peerDocument(Hello(site: 1, peerKey: [], deviceName: "", credentials: nil, credit: 0, maxMessageSize: 0), presence: nil)

    static func resultObject(peer: Value, _ answer: RemoteQueryResult) -> Value {
        let items: [Value], error: Value
        switch answer.outcome {
        case .success(let v): (items, error) = (v, .null)
        case .failure(let e): (items, error) = ([], .object(["code": .string(e.code.wire), "description": .string(e.message)]))
        }
        return .object([
            "peer": peer["peerKey"] ?? .null,
            "deviceName": peer["deviceName"] ?? .null,
            "items": .array(items),
            "error": error,
            "warnings": .array(answer.warnings.map { .object(["description": .string($0)]) }),
            "totalWarningsCount": .int(Int64(answer.warnings.count)),
            "elapsedMilliseconds": .int(Int64(clamping: answer.elapsedMillis)),
        ])
    }
}
