import Auth
import DQL
import HTTP
import Logging
import Postgres
import Store
import Values

/// `POST /api/v4/store/execute`: one DQL statement, Ditto HTTP API v4 shapes.
///
///     request:  {"statement": "SELECT * FROM cars WHERE color = :c", "args": {"c": "blue"}}
///     response: {"transactionId": 42, "queryType": "select", "items": [...],
///                "mutatedDocumentIds": [], "warnings": [], "totalWarningsCount": 0}
///     error:    the same shape with "queryType": "unknown" and the error object in "error"
///               ({"description", "requestId", "status"}: `APIError`)
///
/// `X-DITTO-TXN-ID: n` makes the statement wait until the database has reached transaction n.
/// `Authorization: Bearer <key>` is checked first (401), then the key's scopes against the
/// collections the parsed statement reads and writes (403); the key's read rules narrow what the
/// statement sees and touches (docs/AUTH.md, "Rules"). Bodies may be JSON or CBOR
/// (`APIEncoding`).
struct StoreRoutes {
    let store: DocumentStore
    let auth: Authenticator
    let logger: Logger

    func register(on router: inout HTTPRouter) {
        let store = self.store, auth = self.auth, logger = self.logger
        router.post("/api/v4/store/execute", .respond { request in
            await Self.execute(request, store: store, auth: auth, logger: logger)
        })
    }

    static func execute(_ request: HTTPRequest, store: DocumentStore, auth: Authenticator, logger: Logger) async -> HTTPResponse {
        let principal: Principal
        switch await auth.authenticate(request) {
        case .success(let p): principal = p
        case .failure(let e): return APIError(e).executeResponse(to: request, logger: logger)
        }
        let body: Value
        switch await APIEncoding.decodeBodyOffLoopIfLarge(request) {
        case .success(let v): body = v
        case .failure(let why): return why.executeResponse(to: request, logger: logger)
        }
        // At return, so the background task's reference outlives this handler's (`LateRelease`).
        defer { if request.body.count >= LateRelease.threshold { LateRelease.hold((request.body, body)) } }
        let statement: String, arguments: [String: Value]
        switch Self.statementAndArguments(body) {
        case .success(let r): (statement, arguments) = r
        case .failure(let why): return why.executeResponse(to: request, logger: logger)
        }
        let minimum: Int64?
        switch APIEncoding.minimumTransaction(request) {
        case .success(let n): minimum = n
        case .failure(let why): return why.executeResponse(to: request, logger: logger)
        }
        let parsed: Statement
        do { parsed = try store.parse(statement) } catch {
            return APIError(error).executeResponse(to: request, logger: logger)
        }
        if let denied = principal.authorize(AccessRequirement(parsed)) { return APIError(denied).executeResponse(to: request, logger: logger) }
        let format = APIEncoding.responseFormat(request)
        do {
            let r: ExecuteResult
            switch try await store.executeStreaming(parsed, arguments: arguments, readRules: principal.readRules,
                                                    writeRules: principal.writeRules, minimumTransaction: minimum) {
            case .complete(let complete): r = complete
            case .streaming(let cursor):
                return ResultStreaming.response(cursor, request: request, logger: logger, envelope: .execute, format: format)
            }
            if let items = r.itemsJSON, format == .json {
                var response = HTTPResponse.json(Self.json(r, items: items))
                response.headers.add("Vary", "Accept")
                return response
            }
            return APIEncoding.respond(Self.body(r), to: request)
        } catch {
            return APIError(error).executeResponse(to: request, logger: logger)
        }
    }

    /// `{"statement": text, "args": object or null}` (this route's and `/sync/remote_execute`'s body).
    static func statementAndArguments(_ body: Value) -> Result<(String, [String: Value]), APIError> {
        guard case .object(let fields) = body else { return .failure(APIError(.badRequest, "the request body must be an object")) }
        guard case .string(let statement)? = fields["statement"] else {
            return .failure(APIError(.badRequest, "\"statement\" (a string holding one DQL statement) is required"))
        }
        switch fields["args"] {
        case nil, .null?: return .success((statement, [:]))
        case .object(let a)?: return .success((statement, a))
        default: return .failure(APIError(.badRequest, "\"args\" must be an object of named parameters"))
        }
    }

    /// The response object of a successful statement.
    static func body(_ r: ExecuteResult) -> Value {
        .object([
            "transactionId": .int(r.transactionID),
            "queryType": .string(r.queryType),
            "items": .array(r.items),
            "mutatedDocumentIds": .array(r.mutatedDocumentIDs),
            "warnings": .array(r.warnings.map { .object(["description": .string($0)]) }),
            "totalWarningsCount": .int(Int64(r.warnings.count)),
        ])
    }

    /// `JSON.serialize(body(r))`, byte for byte, with the items' JSON copied from `items` (already
    /// serialized by the read cache) instead of serialized again. Members in sorted key order, as
    /// the serializer writes them.
    static func json(_ r: ExecuteResult, items: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(items.reduce(160) { $0 + $1.count + 1 })
        out.append(contentsOf: #"{"items":["#.utf8)
        for (i, item) in items.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: item)
        }
        out.append(contentsOf: #"],"mutatedDocumentIds":"#.utf8)
        JSONWriter.write(.array(r.mutatedDocumentIDs), into: &out)
        out.append(contentsOf: #","queryType":"#.utf8)
        JSONWriter.write(.string(r.queryType), into: &out)
        out.append(contentsOf: #","totalWarningsCount":"#.utf8)
        JSONWriter.write(.int(Int64(r.warnings.count)), into: &out)
        out.append(contentsOf: #","transactionId":"#.utf8)
        JSONWriter.write(.int(r.transactionID), into: &out)
        out.append(contentsOf: #","warnings":"#.utf8)
        JSONWriter.write(.array(r.warnings.map { .object(["description": .string($0)]) }), into: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
