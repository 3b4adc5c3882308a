import Testing
@testable import CRDT

@Suite struct CRDTModuleTests {
    @Test func moduleIsNamed() { #expect(CRDTModule.name == "CRDT") }
}
