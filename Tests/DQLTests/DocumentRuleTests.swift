import Testing
import Values
@testable import DQL

/// Permission rules (docs/AUTH.md, "Rules"): parsing, claims, bounds, and how they restrict statements.
@Suite struct DocumentRuleTests {
    func resolved(_ entry: String, claims: [String: Value] = [:]) throws -> Expression {
        try DocumentRule.parse(entry: entry).resolved(claims: claims)
    }

    func rules(_ entries: [String], claims: [String: Value] = [:]) throws -> DocumentRules {
        var r = DocumentRules()
        for e in entries {
            let rule = try DocumentRule.parse(entry: e)
            r.add(collection: rule.collection, text: rule.text, condition: try rule.resolved(claims: claims))
        }
        return r
    }

    @Test func parse_entrySplitsAtTheFirstColon_andKeepsTheText() throws {
        let rule = try DocumentRule.parse(entry: " orders :  site = :claims.site ")
        #expect(rule.collection == "orders")
        #expect(rule.text == "site = :claims.site")
        #expect(rule.usesClaims)
        #expect(try !DocumentRule.parse(entry: "orders: site = 'A'").usesClaims)
    }

    @Test func claims_areSubstitutedAsConstants_atAnyDepth() throws {
        let claims: [String: Value] = ["site": "A", "org": ["region": "north"], "sites": ["A", "B"]]
        #expect(try resolved("o: site = :claims.site", claims: claims) == .binary(.equal, .path(Path("site")), .literal("A")))
        #expect(try resolved("o: region = :claims.org.region", claims: claims) == .binary(.equal, .path(Path("region")), .literal("north")))
        #expect(try resolved("o: site = :claims.sites[1]", claims: claims) == .binary(.equal, .path(Path("site")), .literal("B")))
        let r = try rules(["o: site IN :claims.sites"], claims: claims)
        #expect(r.allows(["_id": "1", "site": "B"], in: "o", nowMilliseconds: 0))
        #expect(!r.allows(["_id": "1", "site": "C"], in: "o", nowMilliseconds: 0))
    }

    @Test func missingOrNullClaim_makesTheRuleFalse_evenWhenWrittenToPassOnMissing() throws {
        let f = Expression.literal(.bool(false))
        #expect(try resolved("o: site = :claims.site") == f)
        #expect(try resolved("o: site = :claims.site", claims: ["site": .null]) == f)
        #expect(try resolved("o: :claims.site IS MISSING", claims: [:]) == f)
        #expect(try resolved("o: NOT (site = :claims.site) OR true", claims: ["other": 1]) == f)
        #expect(try resolved("o: site = :claims.org.site", claims: ["org": "flat"]) == f)
        let r = try rules(["o: site = :claims.site"])
        #expect(!r.allows(["_id": "1"], in: "o", nowMilliseconds: 0))
        #expect(!r.allows(["_id": "1", "site": .null], in: "o", nowMilliseconds: 0))
    }

    @Test func legacyForm_isAccepted_whenDQLRefusesItOrReadsItAsNoCondition() throws {
        let r = try rules(["o: _id.site == 'x' && n > 2"])
        #expect(r.allows(["_id": ["site": "x", "k": 1], "n": 3], in: "o", nowMilliseconds: 0))
        #expect(!r.allows(["_id": ["site": "y", "k": 1], "n": 3], in: "o", nowMilliseconds: 0))
        #expect(!r.allows(["_id": ["site": "x", "k": 1], "n": 1], in: "o", nowMilliseconds: 0))
        // `a || b` is a concatenation in DQL, an OR in the legacy form.
        let or = try rules(["o: a == 1 || b == 2"])
        #expect(or.allows(["_id": "1", "b": 2], in: "o", nowMilliseconds: 0))
        #expect(!or.allows(["_id": "1", "b": 3], in: "o", nowMilliseconds: 0))
    }

    @Test func refused_withAReason() {
        let cases: [(String, String)] = [
            ("orders", "collection: condition"),
            ("orders:   ", "empty"),
            (": a = 1", "collection name"),
            ("o: a = ", "does not parse"),
            ("o: a + 1", "not a condition"),
            ("o: a = :other", "rules take only the caller's claims"),
            ("o: a = :claims", "rules take only the caller's claims"),
            ("o: COUNT(*) > 1", "aggregate"),
            ("o: " + String(repeating: "a = 1 AND ", count: 500) + "true", "longer than"),
            ("o: " + String(repeating: "a = 1 OR ", count: 40) + "true", "less deeply nested"),
            ("o: a IN (" + (0..<300).map(String.init).joined(separator: ", ") + ")", "expression nodes"),
        ]
        for (entry, reason) in cases {
            do {
                _ = try DocumentRule.parse(entry: entry)
                Issue.record("accepted: \(entry.prefix(60))")
            } catch {
                #expect(error.description.contains(reason), "\(entry.prefix(60)): \(error)")
            }
        }
    }

    @Test func aRuleMustRunInPostgreSQL_andAClaimTooLargeIsRefused() throws {
        // A scalar function the planner cannot push: refused when the rule is loaded, not per row.
        #expect(throws: DocumentRuleError.self) { try DocumentRule.parse(entry: "o: length(name) > 3") }
        let big: [String: Value] = ["sites": .array((0..<5000).map { .int(Int64($0)) })]
        let rule = try DocumentRule.parse(entry: "o: site IN :claims.sites")
        #expect(throws: DocumentRuleError.self) { try rule.resolved(claims: big) }
    }

    @Test func restricting_andsTheRuleIntoEveryReadingStatement_only() throws {
        let r = try rules(["cars: color = 'red'", "cars: seats > 4"])
        let rule = try #require(r.condition(for: "cars"))
        #expect(rule == .binary(.or, .binary(.equal, .path(Path("color")), .literal("red")), .binary(.greater, .path(Path("seats")), .literal(.int(4)))))
        func filter(_ text: String) throws -> Expression? {
            switch r.restricting(try DQL.parse(text)) {
            case .select(let s): return s.filter
            case .update(let u): return u.filter
            case .delete(let d), .evict(let d): return d.filter
            case .explain(.select(let s)): return s.filter
            default: return nil
            }
        }
        #expect(try filter("SELECT * FROM cars") == rule)
        #expect(try filter("SELECT * FROM cars WHERE a = 1") == .binary(.and, .binary(.equal, .path(Path("a")), .literal(.int(1))), rule))
        #expect(try filter("UPDATE cars SET a = 1") == rule)
        #expect(try filter("DELETE FROM cars WHERE true") == .binary(.and, .literal(.bool(true)), rule))
        #expect(try filter("EVICT FROM cars") == rule)
        #expect(try filter("EXPLAIN SELECT * FROM cars") == rule)
        #expect(try filter("SELECT * FROM people") == nil)
        let insert = try DQL.parse("INSERT INTO cars DOCUMENTS ({'_id': 'x'})")
        #expect(r.restricting(insert) == insert)
        // Byte-exact collection names: the K of "\u{212A}ars" is not "Kars"'s.
        let k = try rules(["Kars: true OR a = 1"])
        #expect(k.condition(for: "Kars") != nil)
        #expect(k.condition(for: "\u{212A}ars") == nil)
        #expect(r.description == "cars: color = 'red'; cars: seats > 4")
    }

    @Test func aTrueRule_leavesTheCollectionWhole() throws {
        let r = try rules(["cars: color = 'red'", "cars: true"])
        #expect(r.condition(for: "cars") == .literal(.bool(true)))
        let s = try DQL.parse("SELECT * FROM cars")
        #expect(r.restricting(s) == s)
    }
}
