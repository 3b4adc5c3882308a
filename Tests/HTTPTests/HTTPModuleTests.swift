import Testing
@testable import HTTP

@Suite struct HTTPModuleTests {
    @Test func moduleIsNamed() { #expect(HTTPModule.name == "HTTP") }
}
