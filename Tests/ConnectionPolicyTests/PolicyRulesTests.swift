import SyncProtocol
import Testing
import Values
@testable import ConnectionPolicy

func candidate(key: [UInt8] = [0xA1, 0xB2], name: String = "tablet-7", meta: [String: Value] = [:], link: LinkType = .webSocket,
               principal: String? = "k_1") -> ConnectionCandidate {
    ConnectionCandidate(peerKey: key, deviceName: name, metadata: meta, link: link, remoteAddress: "10.0.0.7:5000", principal: principal)
}

func parse(_ text: String, limits: PolicyRules.Limits = PolicyRules.Limits()) throws(PolicyConfigurationError) -> PolicyRules {
    try PolicyRules.parse(Array(text.utf8), limits: limits)
}

/// What decides `c` under `rules`: the matching rule's label or `default`.
func decide(_ rules: PolicyRules, _ c: ConnectionCandidate) -> (ConnectionDecision, String) {
    rules.firstMatch(c) ?? (rules.defaultDecision, "default")
}

@Suite struct PolicyRulesTests {
    static let example = """
        {
          "version": 1,
          "default": "deny",
          "retryAfterSeconds": 300,
          "rules": [
            {"name": "stolen", "action": "deny", "peerKey": ["A1B2", "ffff"], "reason": "reported stolen", "retryAfterSeconds": 86400},
            {"name": "crew", "action": "allow", "metadata": {"role": "crew", "deck": ["1", "2"]}},
            {"name": "ble tablets", "action": "allow", "deviceName": "tablet-*", "link": ["Bluetooth", "AccessPoint"]},
            {"name": "guests", "action": "deny", "principal": "jwt:guest-*", "reason": "guests sync through the cloud"},
            {"action": "allow", "principal": "k_*"}
          ]
        }
        """

    @Test func firstMatchingRuleDecides_elseTheDefault() throws {
        let rules = try parse(Self.example)
        #expect(rules.rules.count == 5)
        // Rule 1 comes first, whatever the later rules would say.
        #expect(decide(rules, candidate(key: [0xA1, 0xB2], meta: ["role": "crew", "deck": 1])) == (.deny(reason: "reported stolen", retryAfterSeconds: 86400), "rule 1 (stolen)"))
        // Metadata: every key must match; a number is matched by its JSON text.
        #expect(decide(rules, candidate(key: [1], meta: ["role": "crew", "deck": 2])).1 == "rule 2 (crew)")
        #expect(decide(rules, candidate(key: [1], meta: ["role": "crew", "deck": 3], principal: nil)).1 == "default")
        #expect(decide(rules, candidate(key: [1], meta: ["role": "crew"], principal: nil)).1 == "default", "a missing key does not match")
        // Link types.
        #expect(decide(rules, candidate(key: [1], link: .bluetooth, principal: nil)).1 == "rule 3 (ble tablets)")
        #expect(decide(rules, candidate(key: [1], link: .webSocket, principal: nil)).1 == "default")
        // Principals; a peer without one never matches a principal condition.
        #expect(decide(rules, candidate(key: [1], principal: "jwt:guest-12")) == (.deny(reason: "guests sync through the cloud", retryAfterSeconds: 300), "rule 4 (guests)"))
        #expect(decide(rules, candidate(key: [1], principal: "k_77")) == (.allow, "rule 5"))
        #expect(decide(rules, candidate(key: [1], principal: nil)) == (.deny(reason: "denied by connection policy (no rule allows this peer)", retryAfterSeconds: 300), "default"))
    }

    @Test func defaults_retryAfterAndReason() throws {
        let rules = try parse(#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceName": "x"}]}"#)
        #expect(decide(rules, candidate(name: "x")).0 == .deny(reason: "denied by connection policy", retryAfterSeconds: 60))
        #expect(decide(rules, candidate(name: "y")) == (.allow, "default"))
    }

    /// Each error names where: a line and column for bad JSON, else the rule (number and name).
    @Test func badFiles_areRefusedWithWhereAndWhat() {
        let cases: [(String, String, String)] = [
            ("{\n  \"version\": 1,\n  \"default\": \"allow\"\n  \"rules\": []\n}", "line 4, column 3", "unexpected byte"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "allow"}, {"name": "two", "action": "allow", "deviceNmae": "x"}]}"#,
             "rule 2 (two)", "unknown key \"deviceNmae\""),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "maybe"}]}"#, "rule 1", "\"action\" must be"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "peerKey": "xyz"}]}"#, "rule 1", "is not 1 to 256 bytes of hex"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "link": "Carrier pigeon"}]}"#, "rule 1", "is none of WebSocket"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceName": "a\\"}]}"#, "rule 1", "unfinished escape"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceName": []}]}"#, "rule 1", "array of 1 to 64 strings"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "retryAfterSeconds": -1}]}"#, "rule 1", "retryAfterSeconds"),
            (#"{"version": 1, "default": "allow", "rules": [{"action": "deny", "metadata": {"k": 5}}]}"#, "rule 1", "metadata.k must be"),
            (#"{"version": 2, "default": "allow", "rules": []}"#, "", "\"version\": 1 is required"),
            (#"{"version": 1, "rules": []}"#, "", "\"default\" must be"),
            (#"{"version": 1, "default": "allow", "rules": [], "extra": 1}"#, "", "unknown key \"extra\""),
            (#"{"version": 1, "default": "allow", "rules": [], "version": 1}"#, "line 1, column", "duplicate object key"),
            ("[]", "", "must hold a JSON object"),
        ]
        for (text, location, message) in cases {
            do {
                _ = try parse(text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.location.hasPrefix(location), "\(error)")
                #expect(location.isEmpty == error.location.isEmpty, "\(error)")
                #expect(error.message.contains(message), "\(error)")
            }
        }
    }

    /// Hostile files: huge, deeply nested, too many rules or patterns, a pattern too long. All
    /// are refused by a bound, before or while parsing, never by running out of anything.
    @Test func hostileFiles_hitTheirBounds() {
        func refusal(_ text: String, _ limits: PolicyRules.Limits = PolicyRules.Limits()) -> String {
            do {
                _ = try parse(text, limits: limits)
                return "accepted"
            } catch {
                return error.description
            }
        }
        let huge = #"{"version": 1, "default": "allow", "rules": [], "pad": ""# + String(repeating: "x", count: 300 << 10) + "\"}"
        #expect(refusal(huge).contains("bytes (at most 262144)"))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(refusal(deep).contains("nesting deeper than 5"))
        let nested = #"{"version": 1, "default": "allow", "rules": [{"action": "deny", "metadata": {"k": [["x"]]}}]}"#
        #expect(refusal(nested).contains("nesting deeper than 5"))
        let manyRules = #"{"version": 1, "default": "allow", "rules": ["# + Array(repeating: #"{"action": "allow"}"#, count: 1001).joined(separator: ",") + "]}"
        #expect(refusal(manyRules).contains("1001 rules (at most 1000)"))
        var fewPatterns = PolicyRules.Limits()
        fewPatterns.maxPatterns = 3
        let fourPatterns = #"{"version": 1, "default": "allow", "rules": [{"action": "allow", "deviceName": ["a", "b"]}, {"action": "allow", "principal": ["c", "d"]}]}"#
        #expect(refusal(fourPatterns, fewPatterns).hasPrefix("rule 2: more than 3 patterns"))
        let longPattern = #"{"version": 1, "default": "allow", "rules": [{"action": "allow", "deviceName": ""# + String(repeating: "?", count: 300) + "\"}]}"
        #expect(refusal(longPattern).contains("pattern of 300 characters and wildcards (at most 255)"))
    }

    @Test func retryHint_fitsACloseFrame_andReadsBack() {
        #expect(RetryHint.reason("reported stolen", retryAfterSeconds: 120) == "reported stolen; retry after 120 s")
        let long = RetryHint.reason(String(repeating: "é", count: 200), retryAfterSeconds: 86400)
        #expect(long.utf8.count <= 123)
        #expect(long.hasSuffix("; retry after 86400 s"))
        #expect(long.hasPrefix("éé"))
        #expect(RetryHint.seconds(in: long) == 86400)
        #expect(RetryHint.seconds(in: "reported stolen; retry after 0 s") == 0)
        for none in ["too many sync sessions on this server (at most 5); retry later", "retry after 5 s", "x; retry after  s",
                     "x; retry after -5 s", "x; retry after 99999999999 s", "x; retry after 5 seconds", ""] {
            #expect(RetryHint.seconds(in: none) == nil, "\(none)")
        }
    }
}
