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
///     error:    the same shape with "queryType": "unknown" and "error": {"description": "..."}
///
/// `X-DITTO-TXN-ID: n` makes the statement wait until the database has reached transaction n.
/// `Authorization: Bearer <key>` is checked first (401), then the key's scopes against the
/// collections the parsed statement reads and writes (403). Bodies may be JSON or CBOR
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
        case .failure(let e): return failure(e, request)
        }
        let body: Value
        switch await APIEncoding.decodeBodyOffLoopIfLarge(request) {
        case .success(let v): body = v
        case .failure(let why): return failure(400, why.message, request)
        }
        // At return, so the background task's reference outlives this handler's (`LateRelease`).
        defer { if request.body.count >= LateRelease.threshold { LateRelease.hold((request.body, body)) } }
        guard case .object(let fields) = body else { return failure(400, "the request body must be an object", request) }
        guard case .string(let statement)? = fields["statement"] else {
            return failure(400, "\"statement\" (a string holding one DQL statement) is required", request)
        }
        var arguments: [String: Value] = [:]
        switch fields["args"] {
        case nil, .null?: break
        case .object(let a)?: arguments = a
        default: return failure(400, "\"args\" must be an object of named parameters", request)
        }
        let minimum: Int64?
        switch APIEncoding.minimumTransaction(request) {
        case .success(let n): minimum = n
        case .failure(let why): return failure(400, why.message, request)
        }
        let parsed: Statement
        do { parsed = try store.parse(statement) } catch {
            return failure(400, error.description, request)
        }
        if let denied = principal.authorize(AccessRequirement(parsed)) { return failure(denied, request) }
        let format = APIEncoding.responseFormat(request)
        do {
            // CBOR responses are built whole (a canonical CBOR array states its length first).
            let r: ExecuteResult
            switch try await store.executeStreaming(parsed, arguments: arguments, minimumTransaction: minimum, mayStream: format == .json) {
            case .complete(let complete): r = complete
            case .streaming(let cursor): return ResultStreaming.response(cursor, request: request, logger: logger, envelope: .execute)
            }
            if let items = r.itemsJSON, format == .json {
                var response = HTTPResponse.json(Self.json(r, items: items))
                response.headers.add("Vary", "Accept")
                return response
            }
            return APIEncoding.respond(Self.body(r), to: request)
        } catch {
            return failure(error, request, logger: logger)
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

    /// The error response for a store error (server-side causes logged with the request id).
    static func failure(_ error: StoreError, _ request: HTTPRequest, logger: Logger) -> HTTPResponse {
        log(error, request, logger: logger)
        var response = failure(error.httpStatus, error.description, request)
        if error.httpStatus == 503 { response.headers.add("Retry-After", "2") }
        return response
    }

    static func log(_ error: StoreError, _ request: HTTPRequest, logger: Logger) {
        switch error {
        case .database(let e), .unavailable(let e):
            logger.error("statement failed in the database", metadata: ["error": "\(e.debugDescription)", "request-id": "\(request.requestID)"])
        case .corrupt:
            logger.error("stored document unreadable", metadata: ["error": "\(error)", "request-id": "\(request.requestID)"])
        default: break
        }
    }

    static func failure(_ error: AuthError, _ request: HTTPRequest) -> HTTPResponse {
        var response = failure(error.httpStatus, error.description, request)
        APIEncoding.decorate(&response, for: error)
        return response
    }

    static func failure(_ status: Int, _ description: String, _ request: HTTPRequest) -> HTTPResponse {
        let out: Value = .object([
            "transactionId": .null,
            "queryType": "unknown",
            "items": [],
            "mutatedDocumentIds": [],
            "warnings": [],
            "totalWarningsCount": 0,
            "error": .object(["description": .string(description)]),
        ])
        return APIEncoding.respond(out, status: httpStatus(status), to: request)
    }
}

/// The status line for a code the store reports.
func httpStatus(_ code: Int) -> HTTPStatus {
    switch code {
    case 400: .badRequest
    case 401: .unauthorized
    case 403: .forbidden
    case 404: .notFound
    case 408: .requestTimeout
    case 409: HTTPStatus(409, "Conflict")
    case 415: HTTPStatus(415, "Unsupported Media Type")
    case 413: .contentTooLarge
    case 503: .serviceUnavailable
    default: .internalServerError
    }
}
