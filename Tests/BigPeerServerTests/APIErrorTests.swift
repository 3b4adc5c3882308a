import Auth
@testable import BigPeerServer
import DQL
@testable import HTTP
import Logging
import Postgres
import Store
import Testing
import Values

/// `APIError`, the one place errors become HTTP: each domain error's status and headers, and the
/// one error object every route (and the HTTP layer) answers with.
@Suite struct APIErrorTests {
    static let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
    static let postgres = PostgresError.server(PostgresServerError(sqlState: "XX000", message: "m"))

    static func request(accept: String? = nil) -> HTTPRequest {
        var headers: HTTPHeaders = ["X-Request-ID": "req-1"]
        if let accept { headers.add("Accept", accept) }
        return HTTPRequest(head: HTTPRequestHead(method: .POST, target: "/api/v4/store/execute", version: .http1_1,
                                                 headers: headers, keepAlive: true, expectsContinue: false))
    }

    static func body(_ r: HTTPResponse) throws -> Value? {
        guard case .bytes(let bytes) = r.body else { return nil }
        return try r.headers["Content-Type"] == "application/cbor" ? CBORValueCodec.decode(bytes) : JSON.parse(bytes)
    }

    @Test func storeErrorsKeepTheirStatuses() throws {
        var syntax: DQLSyntaxError?
        do { _ = try DQL.parse("SELEC") } catch { syntax = error }
        // (error, status, whether the server logs it as its own fault)
        let cases: [(StoreError, Int, Bool)] = [
            (.syntax(try #require(syntax)), 400, false), (.invalid("x"), 400, false), (.resultTooLarge("x"), 400, false),
            (.conflict("x"), 409, false), (.notFound("x"), 404, false), (.unknownTransaction(7), 404, false),
            (.tooLarge("x"), 413, false), (.timeout(nil), 408, false), (.busy("x"), 503, false),
            (.unavailable(Self.postgres), 503, true), (.database(Self.postgres), 500, true), (.corrupt("x"), 500, true),
        ]
        for (error, code, logged) in cases {
            let mapped = APIError(error)
            #expect(mapped.status.code == code, "\(error)")
            #expect(mapped.description == error.description)
            #expect((mapped.serverFault != nil) == logged, "\(error)")
            // A failed batch answers with its statement's status and says which statement failed.
            let batch = APIError(StoreBatchError(index: 2, error: error) as any Error)
            #expect(batch.status.code == code && batch.description.hasPrefix("statement 3 failed: "), "\(error)")
        }
    }

    @Test func authErrorsCarryTheirChallenges() {
        func challenge(_ code: String, _ error: AuthError) -> String {
            #"Bearer realm="bigpeer", error=""# + code + #"", error_description=""# + error.description + "\""
        }
        let cases: [(AuthError, Int, String?)] = [
            (.missingCredentials, 401, #"Bearer realm="bigpeer""#),
            (.malformedCredentials, 401, challenge("invalid_request", .malformedCredentials)),
            (.invalidKey, 401, challenge("invalid_token", .invalidKey)),
            (.expiredKey, 401, challenge("invalid_token", .expiredKey)),
            (.revokedKey, 401, challenge("invalid_token", .revokedKey)),
            (.invalidToken(.expired), 401, challenge("invalid_token", .invalidToken(.expired))),
            (.invalidToken(.badSignature), 401, challenge("invalid_token", .invalidToken(.badSignature))),
            (.forbidden("no"), 403, challenge("insufficient_scope", .forbidden("no"))),
            (.unavailable, 503, nil), (.randomUnavailable, 503, nil), (.invalidToken(.keysUnavailable("down")), 503, nil),
        ]
        for (error, code, challenge) in cases {
            let r = APIError(error).response(to: Self.request(), logger: Self.logger)
            #expect(r.status.code == code, "\(error)")
            #expect(r.headers["WWW-Authenticate"] == challenge, "\(error)")
            #expect((r.headers["Retry-After"] != nil) == (code == 503), "\(error)")
        }
    }

    /// RFC 6750 §3: error_description is %x20-21 / %x23-5B / %x5D-7E. A token's own text (its kid)
    /// ends up in it; no token can close the quoted string or start a new header line.
    @Test func aChallengeDescriptionCarriesOnlyTheCharactersRFC6750Allows() {
        let hostile = AuthError.invalidToken(.unknownKey("a\"b\\c\r\nSet-Cookie: x=1\u{7F}é"))
        let header = APIError.bearerChallenge("invalid_token", hostile.description)
        #expect(header == #"Bearer realm="bigpeer", error="invalid_token", error_description="no JWT verification key has kid 'a'b'c??Set-Cookie: x=1???'""#)
        let long = APIError.bearerChallenge("invalid_token", String(repeating: "x", count: 1000))
        #expect(long == #"Bearer realm="bigpeer", error="invalid_token", error_description=""# + String(repeating: "x", count: 200) + "\"")
    }

    @Test func attachmentErrorsKeepTheirStatuses() {
        let cases: [(AttachmentError, Int)] = [(.tooLarge(limit: 1), 413), (.unavailable(Self.postgres), 503),
                                               (.database(Self.postgres), 500), (.corrupt("x"), 500), (.digestFailed, 500)]
        for (error, code) in cases { #expect(APIError(error).status.code == code, "\(error)") }
        // Anything else a route lets through is a bug: 500 without its text.
        struct Unexpected: Error {}
        let unexpected = APIError(Unexpected())
        #expect(unexpected.status.code == 500 && unexpected.description == "internal error" && unexpected.serverFault != nil)
    }

    /// The Retry-After rule, once: every 503 has it (2 s), whatever the domain; a 429 has the
    /// seconds its limit names; nothing else has it.
    @Test func every503And429AndNothingElseHasRetryAfter() {
        let limited = RateLimited(limit: .failedAuthentication, retryAfter: .milliseconds(9_200), refusedInARow: 1)
        let errors: [(APIError, String?)] = [
            (APIError(StoreError.busy("x")), "2"), (APIError(StoreError.unavailable(Self.postgres)), "2"),
            (APIError(AuthError.unavailable), "2"), (APIError(AttachmentError.unavailable(Self.postgres)), "2"),
            (APIError(limited), "10"), (APIError(limited as any Error), "10"),
            (APIError(StoreError.conflict("x")), nil), (APIError(AuthError.invalidKey), nil), (APIError(.badRequest, "x"), nil)]
        for (e, retryAfter) in errors {
            for r in [e.response(to: Self.request(), logger: Self.logger), e.executeResponse(to: Self.request(), logger: Self.logger),
                      e.response(to: Self.request(), logger: Self.logger, negotiated: false)] {
                #expect(r.headers["Retry-After"] == retryAfter, "\(e)")
                #expect(r.headers.values("Retry-After").count == (retryAfter == nil ? 0 : 1), "\(e)")
            }
        }
        #expect(APIError(limited).status.code == 429)
        #expect(APIError(limited).description == "too many failed authentications from this address; retry after 10 s")
    }

    /// One error object: a route's body, /execute's `error` member and the HTTP layer's body are
    /// the same object, in JSON and (for the store routes) in CBOR.
    @Test func everyRouteAndTheHTTPLayerAnswerTheSameObject() throws {
        let expected: Value = ["description": "the API key is not valid", "requestId": "req-1", "status": 401]
        let e = APIError(AuthError.invalidKey)
        for accept in [nil, "application/cbor"] {
            #expect(try Self.body(e.response(to: Self.request(accept: accept), logger: Self.logger)) == ["error": expected])
            let execute = try Self.body(e.executeResponse(to: Self.request(accept: accept), logger: Self.logger))
            #expect(execute == ["transactionId": .null, "queryType": "unknown", "items": [], "mutatedDocumentIds": [],
                                "warnings": [], "totalWarningsCount": 0, "error": expected])
        }
        let json = e.response(to: Self.request(accept: "application/cbor"), logger: Self.logger, negotiated: false)
        #expect(json.headers["Content-Type"] == "application/json")
        #expect(try Self.body(json) == ["error": expected])
        // The HTTP module writes the same bytes as the Values serializer.
        let layer = HTTPResponse.error(.unauthorized, message: "the API key is not valid", requestID: "req-1")
        guard case .bytes(let layerBytes) = layer.body else { Issue.record("streamed"); return }
        #expect(layerBytes == JSON.serialize(["error": expected]))
    }
}
