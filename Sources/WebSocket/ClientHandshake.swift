// The client's opening handshake (RFC 6455 §4.1): the request it sends and the checks it runs on
// the server's answer before a single frame is trusted.

/// One client handshake: a fresh nonce, the request headers, and verification of the response.
public struct WebSocketClientHandshake: Sendable {
    /// `Sec-WebSocket-Key`: base64 of 16 random bytes (§4.1 item 7), new for every connection.
    public let key: String
    public let subprotocols: [String]
    public let deflate: PerMessageDeflateConfiguration?

    public init(subprotocols: [String] = [], deflate: PerMessageDeflateConfiguration? = PerMessageDeflateConfiguration()) {
        self.init(nonce: HandshakeCrypto.randomBytes(16), subprotocols: subprotocols, deflate: deflate)
    }

    /// With a given nonce: for tests that compare against RFC examples.
    init(nonce: [UInt8], subprotocols: [String], deflate: PerMessageDeflateConfiguration?) {
        key = HandshakeCrypto.base64Encode(nonce)
        self.subprotocols = subprotocols
        self.deflate = deflate
    }

    /// Request headers for `GET path HTTP/1.1` (§4.1 items 4–12). `host` includes a non-default port.
    public func requestHeaders(host: String, origin: String? = nil) -> [(name: String, value: String)] {
        var h: [(name: String, value: String)] = [
            ("Host", host),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", key),
            ("Sec-WebSocket-Version", "13"),
        ]
        if let origin { h.append(("Origin", origin)) }
        if !subprotocols.isEmpty { h.append(("Sec-WebSocket-Protocol", subprotocols.joined(separator: ", "))) }
        if let deflate { h.append(("Sec-WebSocket-Extensions", deflate.clientOffer.headerValue)) }
        return h
    }

    /// What the server agreed to.
    public struct Agreement: Sendable, Hashable {
        public var subprotocol: String?
        public var deflate: PerMessageDeflateAgreement?
    }

    /// Checks the server's response (§4.1, "the client MUST _Fail the WebSocket Connection_").
    public func verify(status: Int, headers: [(name: String, value: String)]) -> Result<Agreement, WebSocketHandshakeError> {
        let response = WebSocketUpgradeRequest(method: "", headers: headers)
        guard status == 101 else { return .failure(.unexpectedStatus(status)) }
        guard headerListItems(response.values("Upgrade")).contains(where: { asciiEqualsIgnoringCase($0, "websocket") })
        else { return .failure(.missingUpgradeWebSocket) }
        guard headerListItems(response.values("Connection")).contains(where: { asciiEqualsIgnoringCase($0, "upgrade") })
        else { return .failure(.missingConnectionUpgrade) }
        let accepts = response.values("Sec-WebSocket-Accept")
        guard accepts.count == 1, headerListItems(accepts).first.map(String.init) == HandshakeCrypto.acceptValue(forKey: key)
        else { return .failure(.invalidAccept) }

        var agreement = Agreement()
        let chosen = headerListItems(response.values("Sec-WebSocket-Protocol"))
        if let first = chosen.first {
            guard chosen.count == 1, subprotocols.contains(String(first)) else {
                return .failure(.unexpectedSubprotocol(String(first)))
            }
            agreement.subprotocol = String(first)
        }
        let extensionValues = response.values("Sec-WebSocket-Extensions")
        if !extensionValues.isEmpty {
            guard let elements = WebSocketExtensionElement.parse(extensionValues) else {
                return .failure(.unexpectedExtension(extensionValues.joined(separator: ", ")))
            }
            for element in elements {
                // Only one permessage-deflate, only if offered, only with parameters we allow.
                guard agreement.deflate == nil, let deflate, let agreed = deflate.acceptResponse(element) else {
                    return .failure(.unexpectedExtension(element.headerValue))
                }
                agreement.deflate = agreed
            }
        }
        return .success(agreement)
    }
}
