/// The one connection policy every incoming link passes before sync starts (WebSocket now; LAN
/// TCP and BLE links call the same `decide`). Order: the rules of the policy file (the first
/// match decides); when none matches, the connection webhook; without a webhook, the file's
/// default. With neither configured every candidate is allowed.
public final class PeerPolicy: Sendable {
    public let ruleFile: PolicyRulesFile?
    public let webhook: ConnectionWebhook?

    public init(ruleFile: PolicyRulesFile?, webhook: ConnectionWebhook?) {
        self.ruleFile = ruleFile
        self.webhook = webhook
    }

    /// No rules, no webhook: everyone may sync.
    public static let allowAll = PeerPolicy(ruleFile: nil, webhook: nil)

    public var isEmpty: Bool { ruleFile == nil && webhook == nil }

    public func decide(_ candidate: ConnectionCandidate) async -> PolicyVerdict {
        let current = ruleFile?.current
        if let current, let (decision, label) = current.firstMatch(candidate) { return PolicyVerdict(decision, source: label) }
        if let webhook { return await webhook.decide(candidate) }
        if let current { return PolicyVerdict(current.defaultDecision, source: "default") }
        return PolicyVerdict(.allow, source: "none")
    }

    public func shutdown() async { await webhook?.shutdown() }
}
