import Sockets

/// A request for `HTTPClient`. The URL is `http` or `https`, absolute.
public struct HTTPClientRequest: Sendable {
    public var method: HTTPMethod
    public var url: String
    public var headers: HTTPHeaders
    public var body: [UInt8]

    public init(method: HTTPMethod = .GET, url: String, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

public struct HTTPClientResponse: Sendable {
    public var status: HTTPStatus
    public var version: HTTPVersion
    public var headers: HTTPHeaders
    public var body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
}

public enum HTTPClientError: Error, Sendable, CustomStringConvertible {
    case invalidURL(String)
    case connectFailed(String)
    case tls(String)
    case timedOut
    /// The server closed the connection before a complete response.
    case connectionClosed
    case invalidResponse(HTTPParseError)
    case shutDown

    public var description: String {
        switch self {
        case .invalidURL(let u): "invalid URL: \(u)"
        case .connectFailed(let why): "connect failed: \(why)"
        case .tls(let why): "TLS: \(why)"
        case .timedOut: "timed out"
        case .connectionClosed: "connection closed before a complete response"
        case .invalidResponse(let e): "invalid response: \(e)"
        case .shutDown: "client shut down"
        }
    }
}

/// `scheme://host[:port][/path][?query]`, with `[v6]` hosts. No user info, no fragments sent.
struct ParsedURL: Sendable, Hashable {
    var secure: Bool
    var host: String
    var port: Int
    var target: String

    init(_ url: String) throws(HTTPClientError) {
        let rest: Substring
        if url.hasPrefix("http://") {
            secure = false
            rest = url.dropFirst(7)
        } else if url.hasPrefix("https://") {
            secure = true
            rest = url.dropFirst(8)
        } else {
            throw .invalidURL(url)
        }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        var path = rest[authorityEnd...]
        if let hash = path.firstIndex(of: "#") { path = path[..<hash] }
        guard !authority.isEmpty, !authority.contains("@") else { throw .invalidURL(url) }
        var hostPart = authority
        var portPart: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidURL(url) }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { portPart = after.dropFirst() } else if !after.isEmpty { throw .invalidURL(url) }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = authority[..<colon]
            portPart = authority[authority.index(after: colon)...]
        }
        host = String(hostPart)
        if let portPart {
            guard let p = Int(portPart), (1...65535).contains(p) else { throw .invalidURL(url) }
            port = p
        } else {
            port = secure ? 443 : 80
        }
        guard !host.isEmpty, host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
              path.utf8.allSatisfy({ ByteClass.isTargetByte($0) }) else { throw .invalidURL(url) }
        target = path.isEmpty ? "/" : (path.hasPrefix("?") ? "/" + path : String(path))
    }

    var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? h : "\(h):\(port)"
    }

    var poolKey: String { "\(secure ? "https" : "http")://\(hostHeader)" }
}
