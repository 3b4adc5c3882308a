import ConnectionPolicy
import Logging
import Sync
import SyncProtocol

/// Whether a peer's session may start, whatever link it came by (WebSocket, LAN TCP): its
/// credentials (`SyncAuthentication`), then the connection policy (`SyncConnectionPolicy`: rules
/// and webhook), then room among the server's sessions (`SyncSessionRegistry`: a denied peer never
/// takes a slot). Logged either way.
struct SyncAdmission: Sendable {
    let authentication: SyncAuthentication
    let policy: SyncConnectionPolicy?
    let registry: SyncSessionRegistry
    /// Address and credential limits, failed-authentication counts, the audit log.
    var abuse: AbuseGuard?
    let logger: Logger

    /// The decision on `hello` for session `number` (registered with the registry on acceptance).
    /// `link`: the kind of link (the policy may match on it; it is logged).
    func admit(_ hello: Hello, number: UInt64, sessionID: String, remote: String, link: LinkType) async -> AuthDecision {
        var decision: AuthDecision
        var verified: String?
        if let refusal = abuse?.refusal(handshakeFrom: remote) {
            decision = refusal
        } else {
            decision = await authentication.decide(hello.credentials)
            if case .accept(let permissions) = decision { verified = permissions.principal }
            if let abuse { decision = abuse.settle(decision, hello: hello, remote: remote) }
        }
        if case .accept(let permissions) = decision, let policy,
           let refusal = await policy.refusal(for: hello, link: link, remote: remote, principal: permissions.principal, session: sessionID) {
            decision = refusal
        }
        if case .accept(let permissions) = decision {
            switch registry.admit(number, credentials: hello.credentials, permissions: permissions) {
            case .admitted: break
            case .full: decision = .refuse(code: .policy, reason: "too many sync sessions on this server (at most \(registry.maxSessions)); retry later")
            case .fullForPrincipal:
                decision = .refuse(code: .policy, reason: "too many sync sessions for these credentials (at most \(registry.maxSessionsPerPrincipal)); retry later")
            case .closed: return .refuse(code: .normal, reason: "connection closed")  // nobody left to tell
            }
        }
        abuse?.audit(decision, hello: hello, verified: verified, remote: remote, link: link)
        switch decision {
        case .accept(let permissions):
            logger.info("sync session accepted", metadata: [
                "session": "\(sessionID)", "remote": "\(remote)", "link": "\(link.rawValue)", "site": "\(hello.site)",
                "device": "\(hello.deviceName)", "principal": "\(permissions.principal ?? "insecure-dev")"])
        case .refuse(let code, let reason):
            logger.notice("sync session refused", metadata: [
                "session": "\(sessionID)", "remote": "\(remote)", "link": "\(link.rawValue)", "code": "\(code.rawValue)", "reason": "\(reason)"])
        }
        return decision
    }
}
