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

@Suite struct JSONBIdentityTests {
    @Test func wholeDoublesBecomeIntegers_everythingElseStays() {
        let id: Value = ["k": 1.0, "a": [2.0, 2.5, "x"], "n": .null, "big": 1e19, "neg": -0.0, "s": "1.0"]
        #expect(id.jsonbIdentity == ["k": 1, "a": [2, 2.5, "x"], "n": .null, "big": 1e19, "neg": 0, "s": "1.0"])
        #expect(Value.double(1e16).jsonbIdentity == .int(10_000_000_000_000_000))
        #expect(Value.int(3).jsonbIdentity == .int(3))
        #expect(Value.double(0.5).jsonbIdentity == .double(0.5))
    }

    /// `DocumentIdentity`: equal exactly when jsonb's primary key would be, hashed alike then.
    @Test func documentIdentity_equalAndHashedAsJSONBKeys() {
        let same: [(Value, Value)] = [(["k": 1], ["k": 1.0]), (1, 1.0), ([1, ["a": 2.0]], [1.0, ["a": 2]]), ("x", "x")]
        for (a, b) in same {
            #expect(DocumentIdentity(a) == DocumentIdentity(b), "\(a) \(b)")
            #expect(DocumentIdentity(a).hashValue == DocumentIdentity(b).hashValue, "\(a) \(b)")
        }
        let different: [(Value, Value)] = [(["k": 1], ["k": 1.5]), ("1", 1), ("e\u{301}", "\u{e9}"), (["k": "1"], ["k": 1])]
        for (a, b) in different { #expect(DocumentIdentity(a) != DocumentIdentity(b), "\(a) \(b)") }
        #expect(Set([DocumentIdentity(["k": 1]), DocumentIdentity(["k": 1.0]), DocumentIdentity("k")]).count == 2)
    }
}
