import Logging
import Sync
import SyncProtocol

/// Whether a peer's session may start, whatever link it came by (WebSocket, LAN TCP): its
/// credentials (`SyncAuthentication`), then room among the server's sessions (`SyncSessionRegistry`).
/// Logged either way.
struct SyncAdmission: Sendable {
    let authentication: SyncAuthentication
    let registry: SyncSessionRegistry
    let logger: Logger

    /// The decision on `hello` for session `number` (registered with the registry on acceptance).
    /// `link` names the kind of link in the log (`WebSocket`, `AccessPoint` for LAN TCP).
    func admit(_ hello: Hello, number: UInt64, sessionID: String, remote: String, link: String) async -> AuthDecision {
        var decision = await authentication.decide(hello.credentials)
        if case .accept(let permissions) = decision {
            switch registry.admit(number, credentials: hello.credentials, permissions: permissions) {
            case .admitted: break
            case .full: decision = .refuse(code: .policy, reason: "too many sync sessions on this server (at most \(registry.maxSessions)); retry later")
            case .closed: return .refuse(code: .normal, reason: "connection closed")  // nobody left to tell
            }
        }
        switch decision {
        case .accept(let permissions):
            logger.info("sync session accepted", metadata: [
                "session": "\(sessionID)", "remote": "\(remote)", "link": "\(link)", "site": "\(hello.site)",
                "device": "\(hello.deviceName)", "principal": "\(permissions.principal ?? "insecure-dev")"])
        case .refuse(let code, let reason):
            logger.notice("sync session refused", metadata: [
                "session": "\(sessionID)", "remote": "\(remote)", "link": "\(link)", "code": "\(code.rawValue)", "reason": "\(reason)"])
        }
        return decision
    }
}
