import ConnectionPolicy
import Logging
import Sockets
import Sync
import SyncProtocol

/// The connection policy as the sync handshake applies it: built from the configuration at start
/// (a bad policy file or webhook URL stops the start), asked about each peer whose credentials
/// were accepted, its denial turned into `refuse` 4003 (docs/PROTOCOL.md §4.2).
struct SyncConnectionPolicy: Sendable {
    let policy: PeerPolicy
    let logger: Logger

    /// The policy file, read and checked; nil when none is configured. Before anything starts.
    static func loadRules(_ configuration: ServerConfiguration) throws(PolicyConfigurationError) -> PolicyRulesFile? {
        guard let path = configuration.peerPolicyFile else { return nil }
        return try PolicyRulesFile(path: path)
    }

    /// The webhook on the server's loops; nil when none is configured.
    static func makeWebhook(_ configuration: ServerConfiguration, group: EventLoopGroup) throws(PolicyConfigurationError) -> ConnectionWebhook? {
        guard let url = configuration.connectionWebhook else { return nil }
        var webhook = ConnectionWebhook.Configuration(url: url)
        webhook.timeout = configuration.connectionWebhookTimeout
        return try ConnectionWebhook(webhook, group: group)
    }

    /// Re-reads the policy file when it changes, logging what happened; nil without a file.
    func watch(every interval: Duration) -> Task<Void, Never>? {
        guard let file = policy.ruleFile else { return nil }
        let logger = self.logger
        return file.watch(every: interval) { outcome in
            switch outcome {
            case .unchanged: break
            case .reloaded(let count):
                logger.notice("connection policy reloaded", metadata: ["file": "\(file.path)", "rules": "\(count)"])
            case .rejected(let error):
                logger.error("connection policy file rejected; the previous rules stay in force", metadata: ["error": "\(error)"])
            }
        }
    }

    /// nil when `hello`'s peer may sync; else the refusal to send. `principal`: the identity its
    /// credentials established.
    func refusal(for hello: Hello, link: LinkType, remote: String, principal: String?, session: String) async -> AuthDecision? {
        guard !policy.isEmpty else { return nil }
        let candidate = ConnectionCandidate(hello: hello, link: link, remoteAddress: remote, principal: principal)
        let verdict = await policy.decide(candidate)
        guard case .deny(let reason, let retryAfter) = verdict.decision else { return nil }
        var metadata: Logger.Metadata = ["session": "\(session)", "remote": "\(remote)", "device": "\(hello.deviceName)",
                                         "peerKey": "\(candidate.peerKeyHex)",
                                         "decidedBy": "\(verdict.source)", "retryAfter": "\(retryAfter)"]
        if let failure = verdict.failure { metadata["webhookFailure"] = "\(failure)" }
        logger.notice("sync peer denied by the connection policy", metadata: metadata)
        return .refuse(code: .policy, reason: RetryHint.reason(reason, retryAfterSeconds: retryAfter))
    }
}
