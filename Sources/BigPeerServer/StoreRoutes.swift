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
struct StoreRoutes {
    let store: DocumentStore
    let logger: Logger

    func register(on router: inout HTTPRouter) {
        let store = self.store, logger = self.logger
        router.post("/api/v4/store/execute", .respond { request in
            await Self.execute(request, store: store, logger: logger)
        })
    }

    static func execute(_ request: HTTPRequest, store: DocumentStore, logger: Logger) async -> HTTPResponse {
        let body: Value
        do { body = try JSON.parse(request.body) } catch {
            return failure(400, "the request body is not valid JSON: \(error)")
        }
        guard case .object(let fields) = body else { return failure(400, "the request body must be a JSON object") }
        guard case .string(let statement)? = fields["statement"] else {
            return failure(400, "\"statement\" (a string holding one DQL statement) is required")
        }
        var arguments: [String: Value] = [:]
        switch fields["args"] {
        case nil, .null?: break
        case .object(let a)?: arguments = a
        default: return failure(400, "\"args\" must be an object of named parameters")
        }
        var minimum: Int64?
        if let header = request.headers["X-DITTO-TXN-ID"] {
            guard let n = Int64(header.trimmingCharacters(in: .whitespaces)), n >= 0 else {
                return failure(400, "X-DITTO-TXN-ID must be a non-negative integer")
            }
            minimum = n
        }
        do {
            let r = try await store.execute(statement, arguments: arguments, minimumTransaction: minimum)
            let out: Value = .object([
                "transactionId": .int(r.transactionID),
                "queryType": .string(r.queryType),
                "items": .array(r.items),
                "mutatedDocumentIds": .array(r.mutatedDocumentIDs),
                "warnings": .array(r.warnings.map { .object(["description": .string($0)]) }),
                "totalWarningsCount": .int(Int64(r.warnings.count)),
            ])
            return .json(JSON.serialize(out))
        } catch {
            switch error {
            case .database(let e), .unavailable(let e):
                logger.error("statement failed in the database", metadata: ["error": "\(e.debugDescription)", "request-id": "\(request.requestID)"])
            case .corrupt:
                logger.error("stored document unreadable", metadata: ["error": "\(error)", "request-id": "\(request.requestID)"])
            default: break
            }
            var response = failure(error.httpStatus, error.description)
            if error.httpStatus == 503 { response.headers.add("Retry-After", "2") }
            return response
        }
    }

    static func failure(_ status: Int, _ description: String) -> HTTPResponse {
        let out: Value = .object([
            "transactionId": .null,
            "queryType": "unknown",
            "items": [],
            "mutatedDocumentIds": [],
            "warnings": [],
            "totalWarningsCount": 0,
            "error": .object(["description": .string(description)]),
        ])
        return .json(JSON.serialize(out), status: httpStatus(status))
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
    case 413: .contentTooLarge
    case 503: .serviceUnavailable
    default: .internalServerError
    }
}
