// The server's opening handshake (RFC 6455 §4.2), independent of any HTTP library.
//
//   GET /chat HTTP/1.1                        HTTP/1.1 101 Switching Protocols
//   Host: server.example.com                  Upgrade: websocket
//   Upgrade: websocket                ──►     Connection: Upgrade
//   Connection: Upgrade                       Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=
//   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==   Sec-WebSocket-Protocol: bigpeer-sync.v1
//   Sec-WebSocket-Version: 13                 Sec-WebSocket-Extensions: permessage-deflate
//   Sec-WebSocket-Protocol: bigpeer-sync.v1
//   Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits
//
// The HTTP layer hands over the method and the header lines in order; this file decides the
// status and the response headers. A thin adapter in the HTTP server writes them.

/// The parts of an upgrade request the handshake needs.
public struct WebSocketUpgradeRequest: Sendable {
    public var method: String
    /// The request line's version; §4.2.1 item 1 requires HTTP/1.1 or later.
    public var httpVersion: (major: Int, minor: Int)
    /// Header lines in arrival order; names compare case-insensitively, repeats are kept.
    public var headers: [(name: String, value: String)]

    public init(method: String, httpVersion: (major: Int, minor: Int) = (1, 1), headers: [(name: String, value: String)]) {
        self.method = method
        self.httpVersion = httpVersion
        self.headers = headers
    }

    /// Every value of a header, in order.
    func values(_ name: String) -> [String] {
        headers.compactMap { asciiEqualsIgnoringCase($0.name, name) ? $0.value : nil }
    }
}

/// Why an upgrade was refused, and the HTTP status that says so.
public enum WebSocketHandshakeError: Error, Hashable, Sendable, CustomStringConvertible {
    case methodNotGET                 // §4.2.1 item 1 → 405
    case httpVersionTooOld            // §4.2.1 item 1 → 400 (HTTP/1.0 has no Upgrade)
    case missingHost                  // §4.2.1 item 2 → 400
    case missingUpgradeWebSocket      // §4.2.1 item 3 → 400
    case missingConnectionUpgrade     // §4.2.1 item 4 → 400
    case invalidKey                   // §4.2.1 item 5 → 400
    case unsupportedVersion           // §4.2.1 item 6, §4.4 → 426 + Sec-WebSocket-Version: 13
    case originRejected               // §4.2.2 item 4 / §10.2 → 403
    case subprotocolRequired          // the endpoint insists on one of its subprotocols → 400
    // Client-side verification of the server's answer (§4.1, "the client MUST _Fail_"):
    case unexpectedStatus(Int)
    case invalidAccept
    case unexpectedSubprotocol(String)
    case unexpectedExtension(String)

    /// The status a server answers with.
    public var status: Int {
        switch self {
        case .methodNotGET: 405
        case .unsupportedVersion: 426
        case .originRejected: 403
        default: 400
        }
    }

    public var description: String {
        switch self {
        case .methodNotGET: "WebSocket upgrade requires GET"
        case .httpVersionTooOld: "WebSocket upgrade requires HTTP/1.1 or later"
        case .missingHost: "missing Host header"
        case .missingUpgradeWebSocket: "missing 'Upgrade: websocket'"
        case .missingConnectionUpgrade: "missing 'Connection: Upgrade'"
        case .invalidKey: "Sec-WebSocket-Key must be the base64 of 16 bytes"
        case .unsupportedVersion: "unsupported Sec-WebSocket-Version (13 is supported)"
        case .originRejected: "origin not allowed"
        case .subprotocolRequired: "no supported subprotocol offered"
        case .unexpectedStatus(let s): "server answered \(s), not 101"
        case .invalidAccept: "Sec-WebSocket-Accept does not match the key"
        case .unexpectedSubprotocol(let p): "server chose subprotocol '\(p)' that was not offered"
        case .unexpectedExtension(let e): "server chose extension '\(e)' that was not offered"
        }
    }
}

/// How an endpoint answers upgrade requests.
public struct WebSocketServerHandshake: Sendable {
    /// Subprotocols this endpoint speaks, in its order of preference (e.g. "bigpeer-sync.v1").
    public var subprotocols: [String]
    /// Refuse clients that offer none of `subprotocols` (otherwise they get no subprotocol).
    public var requireSubprotocol: Bool
    /// §10.2: browsers send `Origin`; the policy sees it (nil for non-browser clients).
    public var originPolicy: @Sendable (String?) -> Bool
    /// permessage-deflate policy; nil declines every offer.
    public var deflate: PerMessageDeflateConfiguration?

    public init(
        subprotocols: [String] = [], requireSubprotocol: Bool = false,
        originPolicy: @escaping @Sendable (String?) -> Bool = { _ in true },
        deflate: PerMessageDeflateConfiguration? = PerMessageDeflateConfiguration()
    ) {
        self.subprotocols = subprotocols
        self.requireSubprotocol = requireSubprotocol
        self.originPolicy = originPolicy
        self.deflate = deflate
    }

    /// What a successful upgrade agreed to, and the headers of the 101 response.
    public struct Accepted: Sendable {
        public var subprotocol: String?
        public var deflate: PerMessageDeflateAgreement?
        public var responseHeaders: [(name: String, value: String)]
    }

    /// A refusal: the status, headers to add (426 carries `Sec-WebSocket-Version`), and why.
    public struct Rejected: Error, Sendable {
        public var error: WebSocketHandshakeError
        public var status: Int { error.status }
        public var responseHeaders: [(name: String, value: String)] {
            error == .unsupportedVersion ? [("Sec-WebSocket-Version", "13")] : []
        }
    }

    /// Validates the request (§4.2.1) and builds the response (§4.2.2).
    public func accept(_ request: WebSocketUpgradeRequest) -> Result<Accepted, Rejected> {
        func reject(_ e: WebSocketHandshakeError) -> Result<Accepted, Rejected> { .failure(Rejected(error: e)) }
        guard request.method == "GET" else { return reject(.methodNotGET) }
        guard request.httpVersion.major > 1 || (request.httpVersion.major == 1 && request.httpVersion.minor >= 1) else {
            return reject(.httpVersionTooOld)
        }
        guard let host = request.values("Host").first, !host.isEmpty else { return reject(.missingHost) }
        guard headerListItems(request.values("Upgrade")).contains(where: { asciiEqualsIgnoringCase($0, "websocket") })
        else { return reject(.missingUpgradeWebSocket) }
        guard headerListItems(request.values("Connection")).contains(where: { asciiEqualsIgnoringCase($0, "upgrade") })
        else { return reject(.missingConnectionUpgrade) }
        // §4.4: a version we do not speak gets 426 and the list of versions we do.
        let versions = headerListItems(request.values("Sec-WebSocket-Version"))
        guard versions.count == 1, versions[0] == "13" else { return reject(.unsupportedVersion) }
        let keys = request.values("Sec-WebSocket-Key")
        guard keys.count == 1 else { return reject(.invalidKey) }
        let key = trimmed(keys[0])
        guard let nonce = HandshakeCrypto.base64Decode(key), nonce.count == 16 else { return reject(.invalidKey) }
        guard originPolicy(request.values("Origin").first) else { return reject(.originRejected) }

        // §4.2.2 item 5.5 (/subprotocol/): one of the client's, chosen by our preference.
        let offered = headerListItems(request.values("Sec-WebSocket-Protocol"))
        let subprotocol = subprotocols.first { s in offered.contains { $0 == s } }
        if subprotocol == nil && requireSubprotocol { return reject(.subprotocolRequired) }

        var headers: [(name: String, value: String)] = [
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Accept", HandshakeCrypto.acceptValue(forKey: key)),
        ]
        if let subprotocol { headers.append(("Sec-WebSocket-Protocol", subprotocol)) }
        var agreement: PerMessageDeflateAgreement?
        if let deflate, let offers = WebSocketExtensionElement.parse(request.values("Sec-WebSocket-Extensions")),
           let (agreed, response) = deflate.negotiate(offers: offers) {
            agreement = agreed
            headers.append(("Sec-WebSocket-Extensions", response.headerValue))
        }
        return .success(Accepted(subprotocol: subprotocol, deflate: agreement, responseHeaders: headers))
    }

    private func trimmed(_ s: String) -> String {
        String(s.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
