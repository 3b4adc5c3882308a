@testable import Auth
import DQL
import Testing
import Values

/// The `permissions` claim of a JWT (Ditto's webhook shape) becomes scopes and resolved read rules.
@Suite struct PermissionClaimsTests {
    let rules = JWTClaimRules(now: { 1000 })

    func check(_ claims: [String: Value]) -> Result<Principal, JWTError> {
        var c = claims
        c["exp"] = 2000
        return rules.check(c).map(\.principal)
    }

    @Test func readQueries_becomeTheScopeAndRules_withClaimsResolved() throws {
        let p = try check(["site": "A", "permissions": ["read": ["queriesByCollection": [
            "orders": ["site = :claims.site", "shared = true"], "parts": ["true"]]]]]).get()
        #expect(p.read == .only(["orders", "parts"]))
        #expect(p.write == .none)
        #expect(p.claims["site"] == "A")
        let orders = try #require(p.readRules.condition(for: "orders"))
        #expect(orders == .binary(.or, .binary(.equal, .path(Path("site")), .literal("A")), .binary(.equal, .path(Path("shared")), .literal(true))))
        #expect(p.readRules.condition(for: "parts") == .literal(.bool(true)))
        #expect(p.readRules.allows(["_id": "1", "site": "A"], in: "orders", nowMilliseconds: 0))
        #expect(!p.readRules.allows(["_id": "1", "site": "B"], in: "orders", nowMilliseconds: 0))
    }

    @Test func aMissingClaim_hidesTheCollection() throws {
        let p = try check(["permissions": ["read": ["queriesByCollection": ["orders": ["site = :claims.site"]]]]]).get()
        #expect(p.readRules.condition(for: "orders") == .literal(.bool(false)))
    }

    @Test func everything_andWriteTrue_grantWithoutRules() throws {
        let p = try check(["permissions": ["read": ["everything": true], "write": ["queriesByCollection": ["orders": ["true"]]]]]).get()
        #expect(p.read == .all)
        #expect(p.readRules.isEmpty)
        #expect(p.write == .only(["orders"]))
    }

    @Test func writeQueries_becomeWriteRules_withClaimsResolved_independentOfRead() throws {
        let p = try check(["site": "A", "permissions": [
            "read": ["everything": true],
            "write": ["queriesByCollection": ["orders": ["site = :claims.site", "_id.owner == 'me'"], "parts": ["true"]]]]]).get()
        #expect(p.read == .all && p.readRules.isEmpty)
        #expect(p.write == .only(["orders", "parts"]))
        #expect(p.writeRules.condition(for: "parts") == .literal(.bool(true)))
        let r = p.writeRules
        // Before and after must both match; nil (no document) is not checked.
        #expect(try r.allowsWrite(before: nil, after: ["_id": "1", "site": "A"], in: "orders", nowMilliseconds: 0))
        #expect(try r.allowsWrite(before: ["_id": ["owner": "me"]], after: ["_id": ["owner": "me"], "site": "B"], in: "orders", nowMilliseconds: 0))
        #expect(try !r.allowsWrite(before: nil, after: ["_id": "1", "site": "B"], in: "orders", nowMilliseconds: 0))
        #expect(try !r.allowsWrite(before: ["_id": "1", "site": "A"], after: ["_id": "1", "site": "B"], in: "orders", nowMilliseconds: 0))
        #expect(try !r.allowsWrite(before: ["_id": "1", "site": "B"], after: ["_id": "1", "site": "A"], in: "orders", nowMilliseconds: 0))
        #expect(try !r.allowsWrite(before: ["_id": "1", "site": "B"], after: nil, in: "orders", nowMilliseconds: 0), "a deletion of a document outside")
        #expect(try r.allowsWrite(before: ["_id": "1"], after: ["_id": "1"], in: "parts", nowMilliseconds: 0))
        #expect(try r.allowsWrite(before: ["_id": "1"], after: ["_id": "1"], in: "people", nowMilliseconds: 0), "no rule: the scope decides")
        // A missing claim: the rule is FALSE, nothing can be written.
        let noSite = try check(["permissions": ["write": ["queriesByCollection": ["orders": ["site = :claims.site"]]]]]).get()
        #expect(try !noSite.writeRules.allowsWrite(before: nil, after: ["_id": "1", "site": "A"], in: "orders", nowMilliseconds: 0))
    }

    @Test func writeRules_narrowTheSelectionOfUpdateDeleteEvict_only() throws {
        var rules = DocumentRules()
        let site = try DocumentRule.parse(entry: "orders: site = 'A'")
        rules.add(collection: "orders", text: site.text, condition: try site.resolved(claims: [:]))
        let rule = try #require(rules.condition(for: "orders"))
        for text in ["UPDATE orders SET n = 1 WHERE n > 0", "DELETE FROM orders WHERE n > 0", "EVICT FROM orders WHERE n > 0"] {
            let restricted = rules.restrictingWrites(try DQL.parse(text))
            let filter: Expression? = switch restricted {
            case .update(let u): u.filter
            case .delete(let r), .evict(let r): r.filter
            default: nil
            }
            #expect(filter == .binary(.and, .binary(.greater, .path(Path("n")), .literal(0)), rule), "\(text)")
        }
        for text in ["SELECT * FROM orders", "INSERT INTO orders DOCUMENTS ({'_id': 'x'})"] {
            #expect(rules.restrictingWrites(try DQL.parse(text)) == (try DQL.parse(text)), "\(text)")
        }
    }

    @Test func aRuleThatRunsTooLong_allowsNothing() throws {
        var rules = DocumentRules()
        rules.add(collection: "o", text: "long", condition: try DocumentRule.parse(collection: "o", condition: "tags LIKE '%a%b%c%d%e%f%'").resolved(claims: [:]))
        let huge = Value.object(["_id": "1", "tags": .string(String(repeating: "ab", count: 50_000))])
        #expect(try !rules.allowsWrite(before: nil, after: huge, in: "o", nowMilliseconds: 0))
    }

    @Test func refused_asMalformed() {
        let cases: [(Value, String)] = [
            ("read", "must be an object"),
            (["read": ["everything": true, "queriesByCollection": ["o": ["true"]]]], "ambiguous"),
            (["write": ["queriesByCollection": ["o": ["length(a) > 1"]]]], "cannot run in PostgreSQL"),
            (["write": ["everything": true, "queriesByCollection": ["o": ["true"]]]], "ambiguous"),
            (["read": ["queriesByCollection": ["o": []]]], "non-empty array"),
            (["read": ["queriesByCollection": ["o": [1]]]], "not a string"),
            (["read": ["queriesByCollection": ["o": ["length(a) > 1"]]]], "cannot run in PostgreSQL"),
            (["read": ["queriesByCollection": ["o": ["a = :other"]]]], ":claims.NAME"),
            (["admin": true], "unknown member"),
        ]
        for (permissions, reason) in cases {
            switch check(["permissions": permissions]) {
            case .success(let p): Issue.record("accepted \(permissions): \(p)")
            case .failure(let e): #expect("\(e)".contains(reason), "\(permissions): \(e)")
            }
        }
        // Never mixed with the plain read/write claims.
        guard case .failure = check(["read": "*", "permissions": ["read": ["everything": true]]]) else {
            Issue.record("read with permissions accepted")
            return
        }
    }

    @Test func tooManyQueries_areRefused() {
        let many: [Value] = (0...DocumentRule.maxRulesPerCredential).map { .string("n = \($0)") }
        guard case .failure(let e) = check(["permissions": ["read": ["queriesByCollection": ["o": .array(many)]]]]) else {
            Issue.record("accepted")
            return
        }
        #expect("\(e)".contains("more than"))
    }
}
