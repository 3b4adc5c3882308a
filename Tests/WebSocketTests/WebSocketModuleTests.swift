import Testing
@testable import WebSocket

@Suite struct WebSocketModuleTests {
    @Test func moduleIsNamed() { #expect(WebSocketModule.name == "WebSocket") }
}
