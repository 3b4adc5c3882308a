import Testing
@testable import Values

@Suite struct ValueTests {
    @Test func literalsBuildTheExpectedCases() {
        let v: Value = ["a": 1, "b": [true, nil, 2.5, "x"]]
        #expect(v["a"] == .int(1))
        #expect(v["b"] == .array([.bool(true), .null, .double(2.5), .string("x")]))
        #expect(v.typeName == "object")
    }

    @Test func int64ValueRejectsFractionalDoubles() {
        #expect(Value.double(3.0).int64Value == 3)
        #expect(Value.double(3.5).int64Value == nil)
        #expect(Value.string("3").int64Value == nil)
    }
}
