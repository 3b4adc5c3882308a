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

    @Test func refused_asMalformed() {
        let cases: [(Value, String)] = [
            ("read", "must be an object"),
            (["read": ["everything": true, "queriesByCollection": ["o": ["true"]]]], "ambiguous"),
            (["write": ["queriesByCollection": ["o": ["site = 'A'"]]]], "write rules are not supported yet"),
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
