import HTTP
import Values

/// BigPeer's REST API as a test calls it: requests to `http://127.0.0.1:port`, a bearer key when
/// one is given, JSON bodies in, replies decoded.
public struct RESTClient: Sendable {
    public let http: HTTPClient
    public let port: Int
    /// Sent as `Authorization: Bearer …` when not nil.
    public var key: String?

    public init(http: HTTPClient, port: Int, key: String? = nil) {
        self.http = http
        self.port = port
        self.key = key
    }

    /// The server's numeric address (an IPv6 one is bracketed in the URL).
    public var host = "127.0.0.1"
    public var base: String { "http://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// `POST /api/v4/store/execute` with `statement` and `args`.
    public func execute(_ statement: String, _ args: [String: Value] = [:], headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        try await post("/api/v4/store/execute", ["statement": .string(statement), "args": .object(args)], headers: headers)
    }

    /// `POST /api/v4/store/execute` that must succeed: the reply's body, or `RESTFailure` with the
    /// status and text of any other answer.
    @discardableResult
    public func executeOK(_ statement: String, _ args: [String: Value] = [:]) async throws -> Value {
        let reply = try await execute(statement, args)
        guard reply.status == 200 else { throw RESTFailure(statement: statement, status: reply.status, text: reply.text) }
        return reply.body
    }

    /// POSTs `body` as JSON.
    public func post(_ path: String, _ body: Value, headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        try await post(path, raw: JSON.serialize(body), headers: headers)
    }

    /// POSTs `raw` (as `application/json` unless `headers` name a `Content-Type`).
    public func post(_ path: String, raw: [UInt8], headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        var h = headers
        if !h.contains("Content-Type") { h.add("Content-Type", "application/json") }
        return try await send(.POST, path, headers: h, body: raw)
    }

    public func get(_ path: String, headers: HTTPHeaders = HTTPHeaders()) async throws -> RESTReply {
        try await send(.GET, path, headers: headers, body: [])
    }

    public func send(_ method: HTTPMethod, _ path: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) async throws -> RESTReply {
        var h = headers
        if let key { h.add("Authorization", "Bearer \(key)") }  // added even beside one in `headers` (tests of a doubled header)
        let r = try await http.execute(HTTPClientRequest(method: method, url: base + path, headers: h, body: body))
        return RESTReply(status: r.status.code, headers: r.headers, raw: r.body)
    }
}

/// A reply and its body decoded: CBOR when the server says so, else JSON, else the text as a string.
public struct RESTReply: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var raw: [UInt8]
    public var body: Value

    public init(status: Int, headers: HTTPHeaders, raw: [UInt8]) {
        self.status = status
        self.headers = headers
        self.raw = raw
        if headers["Content-Type"] == "application/cbor", let decoded = try? CBORValueCodec.decode(raw) {
            body = decoded
        } else {
            body = (try? JSON.parse(raw)) ?? .string(String(decoding: raw, as: UTF8.self))
        }
    }

    public var text: String { String(decoding: raw, as: UTF8.self) }

    /// A member of an object body.
    public subscript(_ key: String) -> Value? {
        guard case .object(let o) = body else { return nil }
        return o[key]
    }
}

/// A statement that had to succeed did not.
public struct RESTFailure: Error, CustomStringConvertible {
    public var statement: String
    public var status: Int
    public var text: String
    public var description: String { "\(statement): HTTP \(status) \(text)" }
}
