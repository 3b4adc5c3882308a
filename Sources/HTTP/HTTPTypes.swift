// HTTP: HTTP/1.1 sans-I/O parser and writer, server (keep-alive, pipelining, limits, timeouts),
// router, client. Semantics: RFC 9110; message syntax: RFC 9112.

/// A request method token (RFC 9110 §9). Any token is representable; the common ones are constants.
public struct HTTPMethod: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    public static let GET = HTTPMethod("GET")
    public static let HEAD = HTTPMethod("HEAD")
    public static let POST = HTTPMethod("POST")
    public static let PUT = HTTPMethod("PUT")
    public static let DELETE = HTTPMethod("DELETE")
    public static let PATCH = HTTPMethod("PATCH")
    public static let OPTIONS = HTTPMethod("OPTIONS")
    public static let CONNECT = HTTPMethod("CONNECT")
    public static let TRACE = HTTPMethod("TRACE")

    /// Interns the common methods so parsing them allocates nothing.
    static func from(_ bytes: UnsafeRawBufferPointer) -> HTTPMethod {
        switch bytes.count {
        case 3:
            if bytes.elementsEqual("GET".utf8) { return .GET }
            if bytes.elementsEqual("PUT".utf8) { return .PUT }
        case 4:
            if bytes.elementsEqual("POST".utf8) { return .POST }
            if bytes.elementsEqual("HEAD".utf8) { return .HEAD }
        case 6:
            if bytes.elementsEqual("DELETE".utf8) { return .DELETE }
        case 5:
            if bytes.elementsEqual("PATCH".utf8) { return .PATCH }
        default: break
        }
        return HTTPMethod(String(decoding: bytes, as: UTF8.self))
    }
}

public enum HTTPVersion: Sendable, Hashable, CustomStringConvertible {
    case http1_0, http1_1
    public var description: String { self == .http1_1 ? "HTTP/1.1" : "HTTP/1.0" }
}

/// A status code with its reason phrase (RFC 9110 §15).
public struct HTTPStatus: Hashable, Sendable, CustomStringConvertible {
    public let code: Int
    public let reason: String
    public init(_ code: Int, _ reason: String) { self.code = code; self.reason = reason }
    public var description: String { "\(code) \(reason)" }

    public static let `continue` = HTTPStatus(100, "Continue")
    public static let switchingProtocols = HTTPStatus(101, "Switching Protocols")
    public static let ok = HTTPStatus(200, "OK")
    public static let created = HTTPStatus(201, "Created")
    public static let accepted = HTTPStatus(202, "Accepted")
    public static let noContent = HTTPStatus(204, "No Content")
    public static let movedPermanently = HTTPStatus(301, "Moved Permanently")
    public static let found = HTTPStatus(302, "Found")
    public static let notModified = HTTPStatus(304, "Not Modified")
    public static let badRequest = HTTPStatus(400, "Bad Request")
    public static let unauthorized = HTTPStatus(401, "Unauthorized")
    public static let forbidden = HTTPStatus(403, "Forbidden")
    public static let notFound = HTTPStatus(404, "Not Found")
    public static let methodNotAllowed = HTTPStatus(405, "Method Not Allowed")
    public static let requestTimeout = HTTPStatus(408, "Request Timeout")
    public static let contentTooLarge = HTTPStatus(413, "Content Too Large")
    public static let uriTooLong = HTTPStatus(414, "URI Too Long")
    public static let expectationFailed = HTTPStatus(417, "Expectation Failed")
    public static let requestHeaderFieldsTooLarge = HTTPStatus(431, "Request Header Fields Too Large")
    public static let internalServerError = HTTPStatus(500, "Internal Server Error")
    public static let notImplemented = HTTPStatus(501, "Not Implemented")
    public static let serviceUnavailable = HTTPStatus(503, "Service Unavailable")
    public static let httpVersionNotSupported = HTTPStatus(505, "HTTP Version Not Supported")

    /// Responses to these never carry content (RFC 9110 §6.4.1).
    var forbidsBody: Bool { code < 200 || code == 204 || code == 304 }
}

/// Header fields in wire order, duplicates kept (RFC 9110 §5.3: a dictionary would hide a second
/// `Content-Length`, which is exactly what request smuggling exploits). Lookups ignore ASCII case.
public struct HTTPHeaders: Sendable, Sequence, ExpressibleByDictionaryLiteral, CustomStringConvertible {
    public typealias Field = (name: String, value: String)
    public private(set) var fields: [Field] = []

    public init() {}
    public init(_ fields: [Field]) { self.fields = fields }
    public init(dictionaryLiteral elements: (String, String)...) { fields = elements.map { (name: $0.0, value: $0.1) } }

    public var count: Int { fields.count }
    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }
    public var description: String { fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n") }

    public mutating func add(_ name: String, _ value: String) { fields.append((name: name, value: value)) }

    /// Replaces every field called `name` by one with `value`.
    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        add(name, value)
    }

    public mutating func remove(_ name: String) { fields.removeAll { Self.same($0.name, name) } }

    /// The first value of `name`.
    public subscript(_ name: String) -> String? { fields.first { Self.same($0.name, name) }?.value }

    public func values(_ name: String) -> [String] { fields.filter { Self.same($0.name, name) }.map(\.value) }

    public func contains(_ name: String) -> Bool { fields.contains { Self.same($0.name, name) } }

    /// True when a comma-separated field (e.g. `Connection`) lists `token`, ignoring case.
    public func hasToken(_ token: String, in name: String) -> Bool {
        for f in fields where Self.same(f.name, name) {
            for part in f.value.split(separator: ",") where Self.same(trimOWS(part), token) { return true }
        }
        return false
    }

    @inline(__always)
    static func same<A: StringProtocol, B: StringProtocol>(_ a: A, _ b: B) -> Bool {
        let x = a.utf8, y = b.utf8
        guard x.count == y.count else { return false }
        for (p, q) in zip(x, y) where p != q {
            let lower = p | 0x20
            guard lower == q | 0x20, lower >= 0x61, lower <= 0x7A else { return false }
        }
        return true
    }
}

@inline(__always) func trimOWS(_ s: Substring) -> Substring {
    var s = s
    while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
    while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
    return s
}

/// The parsed head of a request.
public struct HTTPRequestHead: Sendable {
    public var method: HTTPMethod
    /// The request target as sent (origin-form: path and query).
    public var target: String
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    /// Whether the connection may carry another request after this one (RFC 9112 §9.3).
    public var keepAlive: Bool
    /// The client sent `Expect: 100-continue` and waits before sending the body (RFC 9110 §10.1.1).
    public var expectsContinue: Bool

    /// The path part of `target`, without the query. For absolute-form targets
    /// (`http://host/path`, RFC 9112 §3.2.2) the scheme and authority are dropped.
    public var path: Substring {
        // Origin-form (`/path?query`), nearly every request: the `?` found in the bytes. Routing
        // and the access log both ask, and a Character-wise scan cost hundreds of instructions.
        let utf8 = target.utf8
        if utf8.first == UInt8(ascii: "/"), let end = utf8.withContiguousStorageIfAvailable({ $0.firstIndex(of: UInt8(ascii: "?")) ?? $0.count }) {
            return target[..<utf8.index(utf8.startIndex, offsetBy: end)]
        }
        var t = target[...]
        if t.first != "/", let colon = t.firstIndex(of: ":"), t[colon...].hasPrefix("://") {
            let afterAuthority = t[t.index(colon, offsetBy: 3)...]
            t = afterAuthority.firstIndex(where: { $0 == "/" || $0 == "?" }).map { afterAuthority[$0...] } ?? "/"
            if t.first == "?" { return "/" }
        }
        if let q = t.utf8.firstIndex(of: UInt8(ascii: "?")) { return t[..<q] }
        return t
    }

    /// The query part of `target` after `?`, if any.
    public var query: Substring? {
        guard let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        return target[target.utf8.index(after: q)...]
    }
}

/// The parsed head of a response (client side).
public struct HTTPResponseHead: Sendable {
    public var version: HTTPVersion
    public var status: HTTPStatus
    public var headers: HTTPHeaders
    public var keepAlive: Bool
}
