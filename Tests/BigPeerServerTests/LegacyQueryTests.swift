import TestRandomness
import Testing
import Values
@testable import DQL
@testable import BigPeerServer

@Suite struct LegacyQueryTests {
    func t(_ q: String?, _ args: [String: Value] = [:]) throws -> LegacyQuery.Translation {
        let out = try LegacyQuery.translate(q, arguments: args)
        _ = try DQL.parse("SELECT * FROM c WHERE " + out.condition)  // every translation is valid DQL
        return out
    }

    @Test func comparisonsAndLogic() throws {
        #expect(try t("a == 1").condition == "(`a` = 1)")
        #expect(try t("a != 1 && b >= 2.5 || c < -3").condition == "(((`a` != 1) AND (`b` >= 2.5)) OR (`c` < (-3)))")
        #expect(try t("a <= 1e3 && b > 0").condition == "((`a` <= 1e3) AND (`b` > 0))")
        #expect(try t("!(a == 1)").condition == "(NOT (`a` = 1))")
        #expect(try t("!done").condition == "(NOT `done`)")
        #expect(try t("a == 1 && (b == 2 || c == 3)").condition == "((`a` = 1) AND ((`b` = 2) OR (`c` = 3)))")
    }

    @Test func stringsAndArgsBecomeParameters() throws {
        let x = try t("name == 'O\\'Brien' && city == \"Berlin\" && age <= $args.age && zip == $args.addr.zip",
                      ["age": 32, "addr": ["zip": "10115"]])
        #expect(x.condition == "((((`name` = :lq0) AND (`city` = :lq1)) AND (`age` <= :lq2)) AND (`zip` = :lq3))")
        #expect(x.arguments == ["lq0": "O'Brien", "lq1": "Berlin", "lq2": 32, "lq3": "10115"])
    }

    @Test func pathsFunctionsNullAndEmpty() throws {
        #expect(try t("favoriteBook.title == 'x'").condition == "(`favoriteBook`.`title` = :lq0)")
        #expect(try t("tags[0] == 'x'").condition == "(`tags`[0] = :lq0)")
        #expect(try t("a['odd key'] == 1").condition == "(`a`.`odd key` = 1)")
        #expect(try t("contains(tags, 'red')").condition == "array_contains(`tags`, :lq0)")
        #expect(try t("contains(['a', 'b'], color)").condition == "array_contains([:lq0, :lq1], `color`)")
        #expect(try t("starts_with(name, 'A') && ends_with(name, 'z')").condition == "(starts_with(`name`, :lq0) AND ends_with(`name`, :lq1))")
        #expect(try t("regex_match(name, '^A')").condition == "regexp_like(`name`, :lq0)")
        #expect(try t("note == null").condition == "(`note` IS NULL OR `note` IS MISSING)")
        #expect(try t("null != note").condition == "(`note` IS NOT NULL AND `note` IS NOT MISSING)")
        #expect(try t("true").condition == "true")
        #expect(try t(nil).condition == "true")
        #expect(try t("  ").condition == "true")
    }

    @Test func identifiersCannotEscapeTheirQuotes() throws {
        #expect(LegacyQuery.quoteIdentifier("a`b") == "`a``b`")
        #expect(try LegacyQuery.translatePath("a.b[2]") == "`a`.`b`[2]")
        #expect(try LegacyQuery.translatePath("a['x`y']") == "`a`.`x``y`")
        #expect(throws: LegacyQueryError.self) { try LegacyQuery.translatePath("a b") }
        #expect(throws: LegacyQueryError.self) { try LegacyQuery.translatePath("") }
    }

    @Test func errorsNameTheColumn() {
        func error(_ q: String, _ args: [String: Value] = [:]) -> LegacyQueryError? {
            do { _ = try LegacyQuery.translate(q, arguments: args); return nil } catch { return error }
        }
        #expect(error("a = 1")?.column == 3)
        #expect(error("a == ")?.description.contains("query ended") == true)
        #expect(error("a == 'x")?.description.contains("not closed") == true)
        #expect(error("(a == 1")?.description.contains("expected )") == true)
        #expect(error("a == $args.missing")?.description.contains("no argument named missing") == true)
        #expect(error("a == $args.x.y", ["x": 1])?.description.contains("does not exist") == true)
        #expect(error("a == $foo")?.description.contains("$args.name") == true)
        #expect(error("length(a) == 1")?.description.contains("unknown function length") == true)
        #expect(error("contains(a)")?.description.contains("2 arguments") == true)
        #expect(error("a == 1 b")?.description.contains("&&") == true)
        #expect(error("a == 'x\\q'")?.description.contains("unknown escape") == true)
        #expect(error("a == 1.")?.description.contains("decimal point") == true)
        #expect(error(String(repeating: "(", count: 100) + "a" + String(repeating: ")", count: 100))?.description.contains("deeper") == true)
        #expect(error(String(repeating: "!", count: 100) + "a")?.description.contains("deeper") == true)
        #expect(error(String(repeating: "a", count: LegacyQuery.maxQueryBytes + 1))?.description.contains("longer") == true)
    }

    @Test func everyPrefixOfAValidQueryFailsCleanlyOrTranslates() {
        // Split-point sweep: no prefix may crash; each either translates to valid DQL or errors.
        let q = "a.b[1] == 'x\\'y' && !(c != $args.c || contains(tags, \"t\")) && n >= -1.5e2"
        let bytes = Array(q.utf8)
        for n in 0...bytes.count {
            let prefix = String(decoding: bytes[0..<n], as: UTF8.self)
            if let out = try? LegacyQuery.translate(prefix, arguments: ["c": 1]) {
                #expect((try? DQL.parse("SELECT * FROM c WHERE " + out.condition)) != nil, "\(prefix)")
            }
        }
    }
}

@Suite struct LegacyQueryRandomTests {
    typealias Seeded = SeededRandom

    @Test func tokenSoupNeverCrashesAndAlwaysYieldsValidDQLOrAnError() {
        let tokens = ["a", "b.c", "d[0]", "e['k`x']", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "(", ")", "[", "]", ",",
                      "'s'", "\"t\"", "'u\\'v'", "1", "-2.5", "3e2", "true", "false", "null", "$args.x", "$args.o.p", "$args.nope",
                      "contains(", "starts_with(", "regex_match(", "length(", " ", "`", "'", "\\", "é", "\u{0}", "=", "&", "|", "$"]
        var rng = Seeded(seed: 7)
        var translated = 0
        for _ in 0..<5000 {
            let n = Int.random(in: 1...12, using: &rng)
            let q = (0..<n).map { _ in tokens.randomElement(using: &rng) ?? "" }.joined(separator: Bool.random(using: &rng) ? " " : "")
            guard let out = try? LegacyQuery.translate(q, arguments: ["x": 1, "o": ["p": "q"]]) else { continue }
            translated += 1
            #expect((try? DQL.parse("SELECT * FROM c WHERE " + out.condition)) != nil, "\(q) -> \(out.condition)")
        }
        #expect(translated > 100)  // the soup is not all errors
    }
}
