import BigPeerTestSupport
@testable import ConnectionPolicy
import Testing
import Values

/// The order of the sources: a matching rule decides without asking the webhook; the webhook
/// decides what no rule matched; without a webhook the file's default does; with neither, allow.
@Suite struct PeerPolicyTests {
    @Test func rulesFirst_thenTheWebhook_thenTheDefault() async throws {
        let dir = try TemporaryDirectory("bigpeer-policy")
        let path = try dir.write("policy.json", #"{"version": 1, "default": "deny", "rules": [{"action": "deny", "deviceName": "blocked"}]}"#)
        try await WebhookTestServer.with({ _, _ in .json(["authorization": "allow"]) }) { server in
            let webhook = try ConnectionWebhook(ConnectionWebhook.Configuration(url: server.url("/hook")))
            let both = PeerPolicy(ruleFile: try PolicyRulesFile(path: path), webhook: webhook)
            let blocked = await both.decide(candidate(name: "blocked"))
            #expect(blocked == PolicyVerdict(.deny(reason: "denied by connection policy", retryAfterSeconds: 60), source: "rule 1"))
            #expect(server.bodies.isEmpty, "a matching rule decides alone")
            #expect(await both.decide(candidate(name: "other")) == PolicyVerdict(.allow, source: "webhook"), "the default is the webhook's to give")
            #expect(server.bodies.count == 1)
            await both.shutdown()
        }
        let rulesOnly = PeerPolicy(ruleFile: try PolicyRulesFile(path: path), webhook: nil)
        #expect(await rulesOnly.decide(candidate(name: "other")).source == "default")
        #expect(await PeerPolicy.allowAll.decide(candidate(name: "blocked")) == PolicyVerdict(.allow, source: "none"))
    }
}
