import Testing
import TestRandomness
@testable import Values

/// Identity is byte-exact (Values/ExactText.swift): Swift's canonical equivalence must never merge
/// what PostgreSQL keeps apart. Each expectation below failed before the fix (`Value` used the
/// synthesized `==`, which compares `String`s by canonical equivalence; parsers took any key).
@Suite struct ExactTextTests {
    static let kelvin = "\u{212A}ate"  // KELVIN SIGN + "ate": canonically equivalent to "Kate"
    static let nfc = "caf\u{E9}"       // é precomposed
    static let nfd = "cafe\u{301}"     // e + COMBINING ACUTE ACCENT

    @Test func swiftMergesTheseSpellings_valuesDoNot() {
        #expect(Self.kelvin == "Kate")  // the trap, as Swift has it
        #expect(Self.nfc == Self.nfd)
        #expect(Value.string(Self.kelvin) != Value.string("Kate"))
        #expect(Value.string(Self.nfc) != Value.string(Self.nfd))
        #expect(Set<Value>([.string(Self.nfc), .string(Self.nfd)]).count == 2)
        #expect(Value.object(["k": .string(Self.nfc)]) != Value.object(["k": .string(Self.nfd)]))
        #expect(Value.object([Self.nfc: 1]) != Value.object([Self.nfd: 1]))
        #expect(Value.object([Self.nfc: 1]) == Value.object([Self.nfc: 1]))
        #expect(Value.array([.string(Self.nfd)]) != Value.array([.string(Self.nfc)]))
        #expect(!Self.kelvin.utf8Equals("Kate") && "Kate".utf8Equals("Kate"))
        #expect(ExactString(Self.nfc) != ExactString(Self.nfd))
        #expect(Set([ExactString(Self.kelvin), ExactString("Kate")]).count == 2)
    }

    @Test func nameRules() {
        #expect(NameRules.problem("Kate") == nil)
        #expect(NameRules.problem(Self.nfc) == nil)
        #expect(NameRules.problem("q'\u{301}x") == nil)  // a combining mark after a quote is NFC
        #expect(NameRules.problem(Self.kelvin) != nil)
        #expect(NameRules.problem(Self.nfd) != nil)
        #expect(NameRules.problem("colB\u{0}x")?.contains("NUL") == true)
    }

    @Test func jsonKeysMustBeNFC_valuesAreKeptAsSent() throws {
        #expect(throws: JSONParseError.self) { try JSON.parse(#"{"cafe\#u{301}": 1}"#) }
        #expect(throws: JSONParseError.self) { try JSON.parse(#"{"\#u{212A}ate": 1}"#) }
        // Both spellings in one object: refused, not merged.
        #expect(throws: JSONParseError.self) { try JSON.parse(#"{"caf\#u{E9}": 1, "cafe\#u{301}": 2}"#, limits: JSONLimits(requireNFCKeys: false)) }
        let v = try JSON.parse(#"{"v": "cafe\#u{301}"}"#)
        #expect(v["v"] == .string(Self.nfd) && v["v"] != .string(Self.nfc))
        #expect(try JSON.parse(#"{"cafe\#u{301}": 1}"#, limits: .stored)[Self.nfd] == 1)
    }

    @Test func cborMapKeysMustBeNFC() throws {
        var w = CBORWriter()
        w.mapHeader(1)
        w.text(Self.nfd)
        w.int(1)
        var r = try CBORReader(w.bytes)
        #expect(throws: CBORError.self) { try r.value() }
    }

    /// Random strings over an alphabet of look-alikes: equality of values is equality of bytes.
    @Test func valueEqualityIsByteEqualityForRandomStrings() {
        var rng = SeededRandom(seed: 16)
        let alphabet = ["K", "\u{212A}", "e", "\u{301}", "\u{E9}", "A", "\u{30A}", "\u{C5}", "\u{212B}", "'", "`"]
        for _ in 0..<2_000 {
            func word() -> String { (0..<Int.random(in: 0...4, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }.joined() }
            let a = word(), b = word()
            #expect((Value.string(a) == Value.string(b)) == (Array(a.utf8) == Array(b.utf8)))
            if Value.string(a) == Value.string(b) { #expect(Value.string(a).hashValue == Value.string(b).hashValue) }
        }
    }
}
