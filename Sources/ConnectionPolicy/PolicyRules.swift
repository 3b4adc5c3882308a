import SyncProtocol
import Values

/// The rules of a policy file (`--peer-policy`), parsed and checked (`PolicyRules.parse`): an
/// ordered list, the first rule whose conditions all hold decides; none: the default (or the
/// connection webhook, when one is configured). The format is in docs/LOCAL-NODE.md.
public struct PolicyRules: Sendable {
    public enum Action: String, Sendable, Equatable {
        case allow, deny
    }

    /// Everything a rule can require; a condition left out holds for every candidate. A list
    /// holds when any of its entries does; `metadata` holds when every key's pattern does.
    public struct Rule: Sendable {
        /// `rule N` (1-based) and the rule's `name`, for logs and errors.
        public var label: String
        public var action: Action
        var peerKeys: Set<[UInt8]>?
        var deviceNames: [Glob]?
        var metadata: [(key: String, patterns: [Glob])] = []
        var links: Set<LinkType>?
        var principals: [Glob]?
        /// Told to a denied peer (default: `denied by connection policy`).
        var reason: String?
        var retryAfterSeconds: UInt32

        func matches(_ c: ConnectionCandidate) -> Bool {
            if let peerKeys, !peerKeys.contains(c.peerKey) { return false }
            if let links, !links.contains(c.link) { return false }
            if let deviceNames, !deviceNames.contains(where: { $0.matches(c.deviceName) }) { return false }
            if let principals {
                guard let principal = c.principal, principals.contains(where: { $0.matches(principal) }) else { return false }
            }
            for (key, patterns) in metadata {
                guard let value = c.metadata[key] else { return false }
                let text = Self.metadataText(value)
                if !patterns.contains(where: { $0.matches(text) }) { return false }
            }
            return true
        }

        /// A string is matched as it is; any other value by its JSON text (`42`, `true`).
        static func metadataText(_ value: Value) -> String {
            if case .string(let s) = value { return s }
            return JSON.string(value)
        }

        var decision: ConnectionDecision {
            switch action {
            case .allow: .allow
            case .deny: .deny(reason: reason ?? "denied by connection policy", retryAfterSeconds: retryAfterSeconds)
            }
        }
    }

    public var rules: [Rule]
    /// When no rule matches and no webhook is configured.
    public var defaultAction: Action
    /// The delay a denial names unless its rule says otherwise.
    public var defaultRetryAfterSeconds: UInt32

    /// The first matching rule's decision and label; nil when none matches.
    public func firstMatch(_ c: ConnectionCandidate) -> (decision: ConnectionDecision, label: String)? {
        for rule in rules where rule.matches(c) { return (rule.decision, rule.label) }
        return nil
    }

    public var defaultDecision: ConnectionDecision {
        switch defaultAction {
        case .allow: .allow
        case .deny: .deny(reason: "denied by connection policy (no rule allows this peer)", retryAfterSeconds: defaultRetryAfterSeconds)
        }
    }
}
