import Auth
import DQL
import HTTP
import Logging
import Store
import Values

/// The legacy endpoints of Ditto's HTTP API v4 (docs/API.md "Legacy endpoints"): each request
/// is translated into DQL (`LegacyQuery` for query strings, `LegacyCommands` for /write), checked
/// against the key's scopes like any statement, and run by the store under the key's read rules.
///
///     POST /api/v4/store/find      {collection, query?, args?, limit?, offset?, sort?} -> {documents: [{id, fields}], txnId}
///     POST /api/v4/store/findbyid  {collection, id}                                    -> {document: {id, fields}, txnId} | 404
///     POST /api/v4/store/count     {collection, query?, args?}                         -> {count, txnId}
///     POST /api/v4/store/write     {commands: [upsert | update | remove, ...]}          -> {results: [...], txnId}
///     errors: {"error": {"description", "requestId", "status"}} (`APIError`) with the statuses of /execute
struct LegacyRoutes {
    let store: DocumentStore
    let auth: Authenticator
    let logger: Logger

    func register(on router: inout HTTPRouter) {
        let context = Context(store: store, auth: auth, logger: logger)
        router.post("/api/v4/store/find", .respond { await context.handleResponse($0, Self.find) })
        router.post("/api/v4/store/findbyid", .respond { await context.handle($0, Self.findByID) })
        router.post("/api/v4/store/count", .respond { await context.handle($0, Self.count) })
        router.post("/api/v4/store/write", .respond { await context.handle($0, Self.write) })
    }

    struct Context: Sendable {
        let store: DocumentStore
        let auth: Authenticator
        let logger: Logger

        typealias Endpoint = @Sendable (Context, Principal, [String: Value], Int64?) async throws -> Value
        /// An endpoint that makes its own response (one that may stream).
        typealias ResponseEndpoint = @Sendable (Context, Principal, [String: Value], Int64?, HTTPRequest) async throws -> HTTPResponse

        func handle(_ request: HTTPRequest, _ endpoint: @escaping Endpoint) async -> HTTPResponse {
            await handleResponse(request) { c, p, body, minimum, request in
                APIEncoding.respond(try await endpoint(c, p, body, minimum), to: request)
            }
        }

        func handleResponse(_ request: HTTPRequest, _ endpoint: ResponseEndpoint) async -> HTTPResponse {
            do {
                let principal: Principal
                switch await auth.authenticate(request) {
                case .success(let p): principal = p
                case .failure(let e): throw APIError(e)
                }
                guard case .object(let body) = try await APIEncoding.decodeBodyOffLoopIfLarge(request).get() else {
                    throw APIError(.badRequest, "the request body must be an object")
                }
                let minimum = try APIEncoding.minimumTransaction(request).get()
                return try await endpoint(self, principal, body, minimum, request)
            } catch {
                // Endpoints throw APIError and StoreError; anything else is a bug (500, logged).
                return APIError(error).response(to: request, logger: logger)
            }
        }

        /// Parses generated DQL, checks scopes, runs it.
        func run(_ dql: String, _ arguments: [String: Value], principal: Principal, minimum: Int64?) async throws -> ExecuteResult {
            try await store.execute(try authorized(dql, principal: principal), arguments: arguments, readRules: principal.readRules,
                                    writeRules: principal.writeRules, minimumTransaction: minimum)
        }

        /// `run`, but a large result that can stream comes back as a cursor (`executeStreaming`).
        func runStreaming(_ dql: String, _ arguments: [String: Value], principal: Principal, minimum: Int64?) async throws -> ReadOutcome {
            try await store.executeStreaming(try authorized(dql, principal: principal), arguments: arguments, readRules: principal.readRules,
                                             minimumTransaction: minimum)
        }

        func authorized(_ dql: String, principal: Principal) throws -> Statement {
            let statement: Statement
            do { statement = try DQL.parse(dql) } catch { throw APIError(.badRequest, "the query translates to invalid DQL: \(StoreError.syntax(error))") }
            if let denied = principal.authorize(AccessRequirement(statement)) { throw APIError(denied) }
            return statement
        }
    }

    // MARK: - Endpoints

    static func find(_ c: Context, _ p: Principal, _ body: [String: Value], _ minimum: Int64?, _ request: HTTPRequest) async throws -> HTTPResponse {
        let collection = try LegacyCommands.collection(body)
        let (condition, args) = try LegacyCommands.condition(body)
        var dql = "SELECT * FROM \(LegacyQuery.quoteIdentifier(collection)) WHERE \(condition)"
        if let sort = body["sort"], sort != .null {
            guard case .array(let terms) = sort, terms.count <= 32 else { throw APIError(.badRequest, "\"sort\" must be an array of at most 32 {property, direction} objects") }
            var parts: [String] = []
            for term in terms {
                guard case .object(let t) = term, case .string(let property)? = t["property"] else {
                    throw APIError(.badRequest, "each sort term needs \"property\" (a field path)")
                }
                let path = try LegacyCommands.path(property)
                switch t["direction"] {
                case nil, .null?, .string("asc")?: parts.append(path + " ASC")
                case .string("desc")?: parts.append(path + " DESC")
                default: throw APIError(.badRequest, "sort \"direction\" must be \"asc\" or \"desc\"")
                }
            }
            if !parts.isEmpty { dql += " ORDER BY " + parts.joined(separator: ", ") }
        }
        if let limit = try LegacyCommands.count(body, "limit") { dql += " LIMIT \(limit)" }
        if let offset = try LegacyCommands.count(body, "offset") { dql += " OFFSET \(offset)" }
        switch try await c.runStreaming(dql, args, principal: p, minimum: minimum) {
        case .streaming(let cursor):
            return ResultStreaming.response(cursor, request: request, logger: c.logger, envelope: .legacyFind,
                                            format: APIEncoding.responseFormat(request))
        case .complete(let r):
            return APIEncoding.respond(["documents": .array(r.items.map(LegacyCommands.document)), "txnId": .int(r.transactionID)], to: request)
        }
    }

    static func findByID(_ c: Context, _ p: Principal, _ body: [String: Value], _ minimum: Int64?) async throws -> Value {
        let collection = try LegacyCommands.collection(body)
        guard let id = body["id"], id != .null else { throw APIError(.badRequest, "\"id\" (the document id) is required") }
        let r = try await c.run("SELECT * FROM \(LegacyQuery.quoteIdentifier(collection)) WHERE _id = :id", ["id": id], principal: p, minimum: minimum)
        guard let doc = r.items.first else { throw APIError(.notFound, "no document with that id in \(collection)") }
        return ["document": LegacyCommands.document(doc), "txnId": .int(r.transactionID)]
    }

    static func count(_ c: Context, _ p: Principal, _ body: [String: Value], _ minimum: Int64?) async throws -> Value {
        let collection = try LegacyCommands.collection(body)
        let (condition, args) = try LegacyCommands.condition(body)
        let r = try await c.run("SELECT COUNT(*) AS n FROM \(LegacyQuery.quoteIdentifier(collection)) WHERE \(condition)", args, principal: p, minimum: minimum)
        guard case .object(let row)? = r.items.first, let n = row["n"] else { throw APIError(.internalServerError, "COUNT returned no row") }
        return ["count": n, "txnId": .int(r.transactionID)]
    }

    static func write(_ c: Context, _ p: Principal, _ body: [String: Value], _ minimum: Int64?) async throws -> Value {
        guard case .array(let commands)? = body["commands"], !commands.isEmpty else {
            throw APIError(.badRequest, "\"commands\" must be a non-empty array of upsert, update and remove commands")
        }
        guard commands.count <= LegacyCommands.maxCommands else { throw APIError(.badRequest, "at most \(LegacyCommands.maxCommands) commands per write") }
        var translated: [LegacyCommands.Translated] = []
        var requirement = AccessRequirement()
        for (i, command) in commands.enumerated() {
            do {
                let t = try LegacyCommands.translate(command)
                requirement.formUnion(AccessRequirement(t.statement))
                translated.append(t)
            } catch var e as APIError {
                e.description = "command \(i + 1): \(e.description)"
                throw e
            }
        }
        if let denied = p.authorize(requirement) { throw APIError(denied) }
        let results: [ExecuteResult]
        do {
            // update and remove choose their documents like a find: only among those the read rules
            // show (and the write rules allow); every document written must match the write rules.
            results = try await c.store.executeBatch(translated.map { (p.readRules.restricting($0.statement), $0.arguments) },
                                                     writeRules: p.writeRules, minimumTransaction: minimum)
        } catch {
            var failure = APIError(error.error)
            if let i = error.index { failure.description = "command \(i + 1) (\(translated[i].method)): \(error.error.description); nothing was written" }
            throw failure
        }
        let txn = results.first?.transactionID ?? 0
        let out: [Value] = zip(translated, results).map { t, r in LegacyCommands.result(t, r) }
        return ["results": .array(out), "txnId": .int(txn)]
    }
}
