import Auth
import HTTP
import Logging
import Postgres
import Store
import Values

/// A failed REST request as the client sees it: status, description, and the headers that status
/// needs. The one place where errors become HTTP: `StoreError`, `StoreBatchError`, `AuthError`
/// and `AttachmentError` carry no HTTP knowledge; their statuses and headers are decided here.
///
/// Every route answers a failure with the same error object (docs/API.md, "Errors"), the one of
/// Ditto's HTTP API v4 (`description`) plus the status and the request id the logs carry:
///
///     {"error": {"description": "…", "requestId": "…", "status": 404}}
///
/// `/api/v4/store/execute` puts that `error` member inside its result envelope (`executeResponse`).
/// Errors the HTTP layer raises before a route runs (`HTTPResponse.error`) have the same object.
///
/// Headers: every 503 carries `Retry-After: 2`, a 429 the seconds its limit names (RFC 6585 §4);
/// a 401 or 403 from a credential check carries its `WWW-Authenticate` challenge (RFC 6750 §3).
struct APIError: Error, Sendable, CustomStringConvertible {
    var status: HTTPStatus
    var description: String
    /// The `WWW-Authenticate` challenge of a credential or scope failure.
    var challenge: String?
    /// What the server logs (with the request id) when the cause is on the server's side; nil when
    /// the request itself is at fault.
    var serverFault: String?
    /// `Retry-After` seconds (a 429); nil: `retryAfterSeconds` on a 503, none otherwise.
    var retryAfter: Int?

    /// Seconds a client should wait before retrying a 503.
    static let retryAfterSeconds = 2

    init(_ status: HTTPStatus, _ description: String, challenge: String? = nil, serverFault: String? = nil) {
        self.status = status
        self.description = description
        self.challenge = challenge
        self.serverFault = serverFault
    }

    init(_ error: StoreError) {
        let status: HTTPStatus = switch error {
        case .syntax, .invalid, .resultTooLarge: .badRequest
        case .conflict: .conflict
        case .forbidden: .forbidden
        case .notFound, .unknownTransaction: .notFound
        case .tooLarge: .contentTooLarge
        case .timeout: .requestTimeout
        case .unavailable, .busy: .serviceUnavailable
        case .database, .corrupt: .internalServerError
        }
        // The documents and rules of a write-rule refusal are for the audit line, not the client.
        if case .forbidden(let refusal) = error { RefusalNote.current?.record(refusal) }
        let fault: String? = switch error {
        case .database(let e), .unavailable(let e): e.debugDescription
        case .corrupt: "\(error)"
        default: nil
        }
        self.init(status, error.description, serverFault: fault)
    }

    init(_ error: AuthError) {
        switch error {
        case .missingCredentials:
            self.init(.unauthorized, error.description, challenge: #"Bearer realm="bigpeer""#)
        case .malformedCredentials:
            self.init(.unauthorized, error.description, challenge: Self.bearerChallenge("invalid_request", error.description))
        case .invalidToken(.keysUnavailable), .unavailable, .randomUnavailable:
            self.init(.serviceUnavailable, error.description)
        case .webhook(let why) where why.detail != nil:
            self.init(.serviceUnavailable, error.description, serverFault: why.detail)
        case .webhook(.configuration):
            self.init(.serviceUnavailable, error.description, serverFault: error.description)
        case .webhook(.unknownProvider):
            self.init(.unauthorized, error.description, challenge: Self.bearerChallenge("invalid_request", error.description))
        case .invalidKey, .expiredKey, .revokedKey, .invalidToken, .webhook:
            self.init(.unauthorized, error.description, challenge: Self.bearerChallenge("invalid_token", error.description))
        case .forbidden:
            self.init(.forbidden, error.description, challenge: Self.bearerChallenge("insufficient_scope", error.description))
        }
    }

    /// `Bearer realm="bigpeer", error="…", error_description="…"` (RFC 6750 §3). The description
    /// may quote a token's own `kid` or `alg`: characters §3 does not allow in it (`"`, `\`,
    /// controls, non-ASCII) become `'` or `?`, so no token can break out of the quoted string or
    /// the header line; it is cut at 200 bytes.
    static func bearerChallenge(_ code: String, _ description: String) -> String {
        var text: [UInt8] = []
        for c in description.utf8.prefix(200) {
            switch c {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): text.append(UInt8(ascii: "'"))
            case 0x20...0x7E: text.append(c)
            default: text.append(UInt8(ascii: "?"))
            }
        }
        return #"Bearer realm="bigpeer", error=""# + code + #"", error_description=""# + String(decoding: text, as: UTF8.self) + "\""
    }

    init(_ refusal: RateLimited) {
        self.init(.tooManyRequests, refusal.description)
        retryAfter = refusal.retryAfterSeconds
    }

    init(_ error: AttachmentError) {
        switch error {
        case .tooLarge: self.init(.contentTooLarge, error.description)
        case .unavailable(let e): self.init(.serviceUnavailable, error.description, serverFault: e.debugDescription)
        case .database(let e): self.init(.internalServerError, error.description, serverFault: e.debugDescription)
        case .corrupt, .digestFailed: self.init(.internalServerError, error.description, serverFault: "\(error)")
        }
    }

    /// Any error a route lets through. One that is none of the domain errors is a bug, not the
    /// client's fault: 500 with a fixed description (its text stays in the log).
    init(_ error: any Error) {
        switch error {
        case let e as APIError: self = e
        case let e as StoreError: self.init(e)
        case let e as StoreBatchError:
            self.init(e.error)
            description = e.description
        case let e as AuthError: self.init(e)
        case let e as AttachmentError: self.init(e)
        case let e as RateLimited: self.init(e)
        case let e as HTTPRequestBody.Failed: self.init(e.reason == .tooLarge ? .contentTooLarge : .badRequest, e.description)
        default: self.init(.internalServerError, "internal error", serverFault: "\(error)")
        }
    }

    /// The error object: `{"description", "requestId", "status"}`.
    func object(requestID: String) -> Value {
        .object(["description": .string(description), "requestId": .string(requestID), "status": .int(Int64(status.code))])
    }

    /// `{"error": {…}}`, in the encoding the request asked for (`APIEncoding`), or JSON when
    /// `negotiated` is false (routes whose successes are always JSON).
    func response(to request: HTTPRequest, logger: Logger, negotiated: Bool = true) -> HTTPResponse {
        let body: Value = .object(["error": object(requestID: request.requestID)])
        var r = negotiated ? APIEncoding.respond(body, status: status, to: request) : .json(JSON.serialize(body), status: status)
        finish(&r, request: request, logger: logger)
        return r
    }

    /// `/api/v4/store/execute`'s failure: Ditto's execute result with `queryType: "unknown"`, no
    /// items, a null `transactionId`, and the error object in `error`.
    func executeResponse(to request: HTTPRequest, logger: Logger) -> HTTPResponse {
        let body: Value = .object([
            "transactionId": .null,
            "queryType": "unknown",
            "items": [],
            "mutatedDocumentIds": [],
            "warnings": [],
            "totalWarningsCount": 0,
            "error": object(requestID: request.requestID),
        ])
        var r = APIEncoding.respond(body, status: status, to: request)
        finish(&r, request: request, logger: logger)
        return r
    }

    /// The headers the status needs, and the log line of a server-side cause.
    private func finish(_ response: inout HTTPResponse, request: HTTPRequest, logger: Logger) {
        if let challenge { response.headers.add("WWW-Authenticate", challenge) }
        if let retryAfter {
            response.headers.add("Retry-After", String(retryAfter))
        } else if status == .serviceUnavailable {
            response.headers.add("Retry-After", String(Self.retryAfterSeconds))
        }
        if let serverFault {
            logger.error("request failed on the server's side",
                         metadata: ["error": "\(serverFault)", "path": "\(request.path)", "request_id": "\(request.requestID)"])
        }
    }
}

extension HTTPStatus {
    static let conflict = HTTPStatus(409, "Conflict")
    static let unsupportedMediaType = HTTPStatus(415, "Unsupported Media Type")
    static let rangeNotSatisfiable = HTTPStatus(416, "Range Not Satisfiable")
    static let tooManyRequests = HTTPStatus(429, "Too Many Requests")
}
