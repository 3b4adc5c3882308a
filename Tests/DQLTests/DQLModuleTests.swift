import Testing
@testable import DQL

@Suite struct DQLModuleTests {
    @Test func moduleIsNamed() { #expect(DQLModule.name == "DQL") }
}
