import Sockets

/// A complete request as handlers see it: head, aggregated content, and routing results.
public struct HTTPRequest: Sendable {
    public var head: HTTPRequestHead
    public var body: [UInt8]
    public var trailers: HTTPHeaders
    /// Values of the route's `:name` segments, percent-decoded.
    public var pathParameters: [String: String] = [:]
    public var remoteAddress: String?
    /// Loop index and per-loop sequence number: the default request id, formatted only if used.
    var sequence: (loop: Int, number: UInt64) = (0, 0)
    static let processTag: String = {
        var r: UInt32 = 0
        _ = withUnsafeMutableBytes(of: &r) { getentropy($0.baseAddress, 4) }
        return String(r, radix: 16)
    }()

    public init(head: HTTPRequestHead, body: [UInt8] = [], trailers: HTTPHeaders = HTTPHeaders()) {
        self.head = head
        self.body = body
        self.trailers = trailers
    }

    public var method: HTTPMethod { head.method }
    public var path: Substring { head.path }
    public var query: Substring? { head.query }
    public var headers: HTTPHeaders { head.headers }

    /// The client's `X-Request-ID` if it is short and printable, else one made here
    /// (`process-loop-sequence`), unique within this process.
    public var requestID: String { logID.description }
}

import Glibc

/// Thrown by handlers to answer with a given status and a JSON error body.
public struct HTTPError: Error, Sendable {
    public let status: HTTPStatus
    public let message: String
    public init(_ status: HTTPStatus, _ message: String) { self.status = status; self.message = message }
}

/// Takes over a connection after a `101 Switching Protocols` (RFC 9110 §7.8). Called on the
/// connection's loop once the 101 is queued, with the bytes already read past the request: the
/// callee sets itself as `connection.delegate` and from then on owns the connection.
public struct HTTPUpgrade: Sendable {
    public let takeOver: @Sendable (_ connection: TCPConnection, _ bufferedBytes: [UInt8]) -> Void
    public init(takeOver: @escaping @Sendable (_ connection: TCPConnection, _ bufferedBytes: [UInt8]) -> Void) {
        self.takeOver = takeOver
    }
}

/// What a handler decides.
public enum HTTPHandlerResult: Sendable {
    case response(HTTPResponse)
    /// Sends `response` (status 101 with the protocol's headers), then hands the connection over.
    case upgrade(HTTPResponse, HTTPUpgrade)
}

/// A route handler. `.sync` runs inline on the connection's loop, costs no task, and must not
/// block (health checks, cached answers). `.async` runs in a task that prefers the connection's
/// loop as its executor, so it starts and resumes there without a thread hop; it may await I/O.
public enum HTTPHandler: Sendable {
    case sync(@Sendable (HTTPRequest) -> HTTPHandlerResult)
    case async(@Sendable (HTTPRequest) async throws -> HTTPHandlerResult)
    /// Runs as soon as the request head arrives and reads the content from `HTTPRequestBody` as it
    /// arrives (uploads: never buffered whole). `maxBodyBytes` replaces the server's limit for this
    /// route (413 above it). `request.body` is empty. If the handler answers before reading all the
    /// content, the connection closes after the response (the rest is never parsed).
    case streaming(maxBodyBytes: Int, @Sendable (HTTPRequest, HTTPRequestBody) async throws -> HTTPHandlerResult)

    /// An async handler that just returns a response.
    public static func respond(_ body: @escaping @Sendable (HTTPRequest) async throws -> HTTPResponse) -> HTTPHandler {
        .async { .response(try await body($0)) }
    }

    /// A sync handler that just returns a response.
    public static func immediate(_ body: @escaping @Sendable (HTTPRequest) -> HTTPResponse) -> HTTPHandler {
        .sync { .response(body($0)) }
    }
}

/// Maps method and path to a handler. Paths are `/`-separated; a segment `:name` captures one
/// segment; a final `*` matches the rest. Static paths are found with one dictionary lookup.
/// `HEAD` falls back to `GET` (the server drops the body). Immutable once the server starts.
public struct HTTPRouter: Sendable {
    private struct Route: Sendable {
        let segments: [Substring]
        let handlers: [HTTPMethod: HTTPHandler]
    }

    private var staticRoutes: [String: (handlers: [HTTPMethod: HTTPHandler], id: Int)] = [:]
    private var patternRoutes: [(segments: [Substring], handlers: [HTTPMethod: HTTPHandler])] = []
    /// Every registered path as written (`/api/v4/store/:collection`), indexed by route id: the
    /// `route` label of the request metrics (bounded by the routes, whatever clients send).
    public private(set) var routePatterns: [String] = []
    private var patternRouteIDs: [Int] = []

    public init() {}

    public enum Match: Sendable {
        case found(HTTPHandler, parameters: [String: String])
        case methodNotAllowed(allow: [HTTPMethod])
        case notFound
    }

    /// The largest content any streaming route accepts (the server's parser must let that through).
    public private(set) var largestStreamingBodyLimit = 0

    public mutating func on(_ method: HTTPMethod, _ path: String, _ handler: HTTPHandler) {
        if case .streaming(let limit, _) = handler { largestStreamingBodyLimit = max(largestStreamingBodyLimit, limit) }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        if segments.allSatisfy({ !$0.hasPrefix(":") && $0 != "*" }) {
            let key = normalized(path)
            if staticRoutes[key] == nil { staticRoutes[key] = ([:], newRouteID(key)) }
            staticRoutes[key]?.handlers[method] = handler
            return
        }
        if let i = patternRoutes.firstIndex(where: { $0.segments == segments }) {
            patternRoutes[i].handlers[method] = handler
        } else {
            patternRoutes.append((segments: segments, handlers: [method: handler]))
            patternRouteIDs.append(newRouteID(normalized(path)))
        }
    }

    /// Replaces every route's handler with `transform(method, path pattern, handler)`: checks that
    /// wrap many routes (abuse limits), applied once the routes are registered.
    public mutating func wrapHandlers(_ transform: (HTTPMethod, String, HTTPHandler) -> HTTPHandler) {
        for (path, route) in staticRoutes {
            staticRoutes[path]?.handlers = Dictionary(uniqueKeysWithValues: route.handlers.map { ($0.key, transform($0.key, path, $0.value)) })
        }
        for i in patternRoutes.indices {
            let path = "/" + patternRoutes[i].segments.joined(separator: "/")
            patternRoutes[i].handlers = Dictionary(uniqueKeysWithValues: patternRoutes[i].handlers.map { ($0.key, transform($0.key, path, $0.value)) })
        }
    }

    public mutating func get(_ path: String, _ handler: HTTPHandler) { on(.GET, path, handler) }
    public mutating func post(_ path: String, _ handler: HTTPHandler) { on(.POST, path, handler) }
    public mutating func put(_ path: String, _ handler: HTTPHandler) { on(.PUT, path, handler) }
    public mutating func patch(_ path: String, _ handler: HTTPHandler) { on(.PATCH, path, handler) }
    public mutating func delete(_ path: String, _ handler: HTTPHandler) { on(.DELETE, path, handler) }

    private func normalized(_ path: String) -> String {
        "/" + path.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "/")
    }

    private mutating func newRouteID(_ pattern: String) -> Int {
        routePatterns.append(pattern)
        return routePatterns.count - 1
    }

    public func match(_ method: HTTPMethod, path: Substring) -> Match { matchRoute(method, path: path).match }

    /// `match` plus the matched path's route id (an index into `routePatterns`; nil: no path matched).
    public func matchRoute(_ method: HTTPMethod, path: Substring) -> (match: Match, route: Int?) {
        var key = String(path)
        var exact = staticRoutes[key]
        if exact == nil && (path.contains("//") || (path.count > 1 && path.hasSuffix("/"))) {
            key = normalized(key)
            exact = staticRoutes[key]
        }
        if let (handlers, id) = exact {
            return (pick(method, handlers, parameters: [:]), id)
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        for (i, route) in patternRoutes.enumerated() {
            if let params = Self.bind(route.segments, parts) { return (pick(method, route.handlers, parameters: params), patternRouteIDs[i]) }
        }
        return (.notFound, nil)
    }

    private func pick(_ method: HTTPMethod, _ handlers: [HTTPMethod: HTTPHandler], parameters: [String: String]) -> Match {
        if let h = handlers[method] ?? (method == .HEAD ? handlers[.GET] : nil) { return .found(h, parameters: parameters) }
        var allow = handlers.keys.map(\.rawValue)
        if handlers[.GET] != nil && handlers[.HEAD] == nil { allow.append("HEAD") }
        return .methodNotAllowed(allow: allow.sorted().map(HTTPMethod.init))
    }

    private static func bind(_ pattern: [Substring], _ parts: [Substring]) -> [String: String]? {
        var params: [String: String] = [:]
        for (i, seg) in pattern.enumerated() {
            if seg == "*" { return params }
            guard i < parts.count else { return nil }
            if seg.hasPrefix(":") {
                guard let value = percentDecode(parts[i]) else { return nil }
                params[String(seg.dropFirst())] = value
            } else if seg != parts[i] {
                return nil
            }
        }
        return pattern.count == parts.count ? params : nil
    }

    /// Decodes `%XX` escapes (RFC 3986 §2.1); nil for a broken escape or invalid UTF-8.
    static func percentDecode(_ s: Substring) -> String? {
        guard s.utf8.contains(UInt8(ascii: "%")) else { return String(s) }
        var out: [UInt8] = []
        var it = s.utf8.makeIterator()
        while let b = it.next() {
            if b == UInt8(ascii: "%") {
                guard let h = it.next().flatMap(ByteClass.hexValue), let l = it.next().flatMap(ByteClass.hexValue) else { return nil }
                out.append(UInt8(h << 4 | l))
            } else {
                out.append(b)
            }
        }
        return String(validating: out, as: UTF8.self)
    }
}
