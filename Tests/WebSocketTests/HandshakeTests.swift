import Testing
import TestRandomness
@testable import WebSocket

@Suite struct HandshakeCryptoTests {
    /// RFC 6455 §1.3 worked example.
    @Test func acceptValue_matchesRFCExample() {
        #expect(HandshakeCrypto.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    @Test func base64_roundTripsEveryLength_andRejectsNonCanonicalInput() {
        var rng = SeededRandom(seed: 1)
        for n in 0..<40 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            #expect(HandshakeCrypto.base64Decode(HandshakeCrypto.base64Encode(bytes)) == bytes)
        }
        #expect(HandshakeCrypto.base64Encode(Array("foobar".utf8)) == "Zm9vYmFy")
        #expect(HandshakeCrypto.base64Encode(Array("fo".utf8)) == "Zm8=")
        for bad in ["Zm9", "Zm9v YmFy", "Zm9=", "Zm8==", "Zh==", "Z===", "!!!!"] {
            #expect(HandshakeCrypto.base64Decode(bad) == nil, "\(bad)")
        }
    }

    @Test func randomNonces_differ() {
        #expect(WebSocketClientHandshake().key != WebSocketClientHandshake().key)
        #expect(HandshakeCrypto.base64Decode(WebSocketClientHandshake().key)?.count == 16)
    }
}

@Suite struct ServerHandshakeTests {
    static let key = "dGhlIHNhbXBsZSBub25jZQ=="

    func request(method: String = "GET", replacing name: String? = nil, with value: String? = nil,
                 adding extra: [(String, String)] = []) -> WebSocketUpgradeRequest {
        var headers: [(name: String, value: String)] = [
            ("Host", "server.example.com"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", Self.key), ("Sec-WebSocket-Version", "13"),
        ]
        if let name {
            headers.removeAll { $0.name == name }
            if let value { headers.append((name, value)) }
        }
        headers += extra.map { (name: $0.0, value: $0.1) }
        return WebSocketUpgradeRequest(method: method, headers: headers)
    }

    func rejection(_ r: WebSocketUpgradeRequest, _ h: WebSocketServerHandshake = .init()) -> WebSocketHandshakeError? {
        if case .failure(let f) = h.accept(r) { return f.error }
        return nil
    }

    func header(_ name: String, in accepted: WebSocketServerHandshake.Accepted) -> String? {
        accepted.responseHeaders.first { $0.name == name }?.value
    }

    @Test func validRequest_isAccepted_withRFCAcceptValue() throws {
        let accepted = try WebSocketServerHandshake().accept(request()).get()
        #expect(header("Sec-WebSocket-Accept", in: accepted) == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        #expect(header("Upgrade", in: accepted) == "websocket")
        #expect(header("Connection", in: accepted) == "Upgrade")
        #expect(accepted.subprotocol == nil && accepted.deflate == nil)
    }

    @Test func headerNamesAndTokens_areCaseInsensitive_andListsAreSplit() throws {
        let r = WebSocketUpgradeRequest(method: "GET", headers: [
            ("host", "h"), ("UPGRADE", "WebSocket"), ("connection", "keep-alive, upgrade"),
            ("sec-websocket-key", " \(Self.key) "), ("Sec-WebSocket-Version", "13"),
        ])
        #expect(rejection(r) == nil)
    }

    @Test func eachMissingRequirement_isRefusedWithItsStatus() {
        let cases: [(WebSocketUpgradeRequest, WebSocketHandshakeError, Int)] = [
            (request(method: "POST"), .methodNotGET, 405),
            (WebSocketUpgradeRequest(method: "GET", httpVersion: (1, 0), headers: request().headers), .httpVersionTooOld, 400),
            (request(replacing: "Host"), .missingHost, 400),
            (request(replacing: "Upgrade", with: "h2c"), .missingUpgradeWebSocket, 400),
            (request(replacing: "Connection", with: "keep-alive"), .missingConnectionUpgrade, 400),
            (request(replacing: "Sec-WebSocket-Key"), .invalidKey, 400),
            (request(replacing: "Sec-WebSocket-Key", with: "c2hvcnQ="), .invalidKey, 400),          // 5 bytes
            (request(replacing: "Sec-WebSocket-Key", with: "not base64 at all!!!!!=="), .invalidKey, 400),
            (request(adding: [("Sec-WebSocket-Key", Self.key)]), .invalidKey, 400),                 // two keys
            (request(replacing: "Sec-WebSocket-Version", with: "8"), .unsupportedVersion, 426),
            (request(replacing: "Sec-WebSocket-Version"), .unsupportedVersion, 426),
        ]
        for (r, error, status) in cases {
            #expect(rejection(r) == error)
            #expect(error.status == status)
        }
    }

    @Test func unsupportedVersion_advertises13() throws {
        guard case .failure(let f) = WebSocketServerHandshake().accept(request(replacing: "Sec-WebSocket-Version", with: "7")) else {
            Issue.record("expected a rejection"); return
        }
        #expect(f.status == 426)
        #expect(f.responseHeaders.map(\.name) == ["Sec-WebSocket-Version"])
        #expect(f.responseHeaders.map(\.value) == ["13"])
    }

    @Test func originPolicy_canRefuse() {
        let h = WebSocketServerHandshake(originPolicy: { $0 == "https://app.example" })
        #expect(rejection(request(adding: [("Origin", "https://evil.example")]), h) == .originRejected)
        #expect(rejection(request(adding: [("Origin", "https://app.example")]), h) == nil)
        #expect(rejection(request(), h) == .originRejected) // no Origin: this policy wants one
    }

    @Test func subprotocol_isChosenByServerPreference() throws {
        let h = WebSocketServerHandshake(subprotocols: ["bigpeer-sync.v1", "chat"])
        let accepted = try h.accept(request(adding: [("Sec-WebSocket-Protocol", "chat, bigpeer-sync.v1")])).get()
        #expect(accepted.subprotocol == "bigpeer-sync.v1")
        #expect(header("Sec-WebSocket-Protocol", in: accepted) == "bigpeer-sync.v1")
        let none = try h.accept(request(adding: [("Sec-WebSocket-Protocol", "other")])).get()
        #expect(none.subprotocol == nil && header("Sec-WebSocket-Protocol", in: none) == nil)
        let strict = WebSocketServerHandshake(subprotocols: ["bigpeer-sync.v1"], requireSubprotocol: true)
        #expect(rejection(request(adding: [("Sec-WebSocket-Protocol", "other")]), strict) == .subprotocolRequired)
    }

    @Test func deflateOffer_isNegotiated_andMalformedHeaderIsIgnored() throws {
        let h = WebSocketServerHandshake(deflate: PerMessageDeflateConfiguration())
        let accepted = try h.accept(request(adding: [("Sec-WebSocket-Extensions", "foo, permessage-deflate; client_max_window_bits")])).get()
        #expect(header("Sec-WebSocket-Extensions", in: accepted) == "permessage-deflate")
        #expect(accepted.deflate != nil)
        let malformed = try h.accept(request(adding: [("Sec-WebSocket-Extensions", "permessage-deflate; =")])).get()
        #expect(malformed.deflate == nil && header("Sec-WebSocket-Extensions", in: malformed) == nil)
        let off = try WebSocketServerHandshake(deflate: nil).accept(request(adding: [("Sec-WebSocket-Extensions", "permessage-deflate")])).get()
        #expect(off.deflate == nil)
    }
}

@Suite struct ClientHandshakeTests {
    let handshake = WebSocketClientHandshake(nonce: Array("the sample nonce".utf8), subprotocols: ["bigpeer-sync.v1"],
                                             deflate: PerMessageDeflateConfiguration())

    var goodResponse: [(name: String, value: String)] {
        [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")]
    }

    @Test func request_carriesKeyVersionProtocolsAndOffer() {
        let headers = handshake.requestHeaders(host: "example.com:8080")
        #expect(headers.first { $0.name == "Sec-WebSocket-Key" }?.value == "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(headers.first { $0.name == "Sec-WebSocket-Version" }?.value == "13")
        #expect(headers.first { $0.name == "Sec-WebSocket-Protocol" }?.value == "bigpeer-sync.v1")
        #expect(headers.first { $0.name == "Sec-WebSocket-Extensions" }?.value == "permessage-deflate; client_max_window_bits")
    }

    @Test func serverAnswer_fromOurOwnServerHandshake_verifies() throws {
        let request = WebSocketUpgradeRequest(method: "GET", headers: handshake.requestHeaders(host: "h"))
        let accepted = try WebSocketServerHandshake(subprotocols: ["bigpeer-sync.v1"]).accept(request).get()
        let agreement = try handshake.verify(status: 101, headers: accepted.responseHeaders).get()
        #expect(agreement.subprotocol == "bigpeer-sync.v1")
        #expect(agreement.deflate != nil)
    }

    @Test func badAnswers_failTheConnection() {
        func verify(_ status: Int, _ headers: [(name: String, value: String)]) -> WebSocketHandshakeError? {
            if case .failure(let e) = handshake.verify(status: status, headers: headers) { return e }
            return nil
        }
        #expect(verify(101, goodResponse) == nil)
        #expect(verify(200, goodResponse) == .unexpectedStatus(200))
        #expect(verify(101, goodResponse.filter { $0.name != "Upgrade" }) == .missingUpgradeWebSocket)
        #expect(verify(101, goodResponse.filter { $0.name != "Connection" }) == .missingConnectionUpgrade)
        #expect(verify(101, goodResponse.filter { $0.name != "Sec-WebSocket-Accept" } + [("Sec-WebSocket-Accept", "wrong=")]) == .invalidAccept)
        #expect(verify(101, goodResponse + [("Sec-WebSocket-Protocol", "chat")]) == .unexpectedSubprotocol("chat"))
        #expect(verify(101, goodResponse + [("Sec-WebSocket-Extensions", "x-unknown")]) == .unexpectedExtension("x-unknown"))
        #expect(verify(101, goodResponse + [("Sec-WebSocket-Extensions", "permessage-deflate, permessage-deflate")])
                == .unexpectedExtension("permessage-deflate"))
        let noDeflate = WebSocketClientHandshake(nonce: Array("the sample nonce".utf8), subprotocols: [], deflate: nil)
        if case .failure(let e) = noDeflate.verify(status: 101, headers: goodResponse + [("Sec-WebSocket-Extensions", "permessage-deflate")]) {
            #expect(e == .unexpectedExtension("permessage-deflate"))
        } else {
            Issue.record("an extension we did not offer must fail the handshake")
        }
    }
}
