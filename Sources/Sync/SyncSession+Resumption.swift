// A session that outlives its link (PROTOCOL.md §4.16): numbered messages are counted both ways
// (`SessionResumption`), confirmed with `rack`, and replayed after a resume on another link, so
// the peer goes on where it was: no subscription restarts, nothing it received is sent again.

import SyncProtocol

extension SyncSession {
    /// Counts a message received in a resumable session; false when it was a `rack` (handled here)
    /// or broke the session.
    mutating func counted(_ message: SyncMessage, size: Int, into out: inout [SyncSessionAction]) -> Bool {
        if case .received(let n) = message {
            do { try resumption?.confirm(n) } catch {
                close(.protocolViolation, "rack \(n) outside what was sent (\(error))", into: &out)
            }
            return false
        }
        if message.isNumbered, resumption?.noteReceived(size: size) == true { sendRack(into: &out) }
        return true
    }

    mutating func sendRack(into out: inout [SyncSessionAction]) {
        guard let rack = resumption?.takeRack() else { return }
        send(rack, into: &out)
    }

    /// The peer resumed this session on a new link, having received `peerReceived` of its numbered
    /// messages and presented credentials of `principal` there: `welcome` with the server's count,
    /// then every message after the peer's. Nil when the session cannot be resumed (closed, not
    /// resumable, another identity — a stolen token alone does not carry a session's permissions
    /// over to other credentials —, or a count outside what was sent): the peer then gets a new session.
    public mutating func resume(peerReceived: UInt64, principal: String?, now: UInt64) -> [SyncSessionAction]? {
        guard state == .ready, var r = resumption, principal == permissions.principal else { return nil }
        let replay: ArraySlice<[UInt8]>
        do { replay = try r.replay(after: peerReceived) } catch { return nil }
        resumption = r
        detached = false
        lastReceived = now
        var out: [SyncSessionAction] = []
        send(.welcome(Welcome(site: configuration.serverSite, sessionID: configuration.sessionID,
                              heartbeatMillis: configuration.heartbeatMillis,
                              maxMessageSize: UInt64(configuration.limits.maxMessageSize),
                              credit: 0, resumeToken: r.token, resumedReceived: r.received,
                              credentials: credentialStatus(now: now))), into: &out)
        out += replay.map { .resend($0) }
        return out
    }
}
