import Testing
@testable import WebSocket

@Suite struct HandshakeCryptoTests {
    /// RFC 6455 §1.3 worked example.
    @Test func acceptValue_matchesRFCExample() {
        #expect(HandshakeCrypto.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }
}
