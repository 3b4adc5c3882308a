// The peer's half of a session that moves between links (PROTOCOL.md §4.16): numbered messages
// are recorded as they are sent (`emit`), `rack`s confirm what arrived, and a `welcome` with `rx`
// resumes: the peer writes again what the server did not receive, the server does the same.

import SyncProtocol

extension SyncClientSession {
    /// A numbered message to send (recorded for a resume).
    mutating func emit(_ message: SyncMessage) -> Action {
        let bytes = message.encode()
        if message.isNumbered { resumption?.recordSent(bytes) }
        return .send(bytes)
    }

    mutating func rack(now: UInt64) -> Action {
        lastRackAt = now
        return .send((resumption?.takeRack() ?? .received(0)).encode())
    }

    /// The server resumed the session: send again what it did not receive.
    mutating func resumed(_ w: Welcome, serverReceived: UInt64, now: UInt64) -> [Action] {
        guard var r = resumption else { return fail(SyncCloseCode.protocolViolation.rawValue, "welcome resumes a session this peer did not have") }
        let replay: ArraySlice<[UInt8]>
        do { replay = try r.replay(after: serverReceived) } catch {
            return fail(SyncCloseCode.protocolViolation.rawValue, "welcome rx \(serverReceived): \(error)")
        }
        resumption = r
        resuming = false
        state = .ready
        linksUsed += 1
        lastReceivedAt = now
        return [.resumed(w)] + replay.map { .send($0) }
    }

    /// The server did not resume (it no longer has the session, or another instance answered):
    /// everything of the old session is dropped, and the welcome starts a new one.
    mutating func startOver(now: UInt64) {
        let used = linksUsed
        self = SyncClientSession(configuration: configuration)
        linksUsed = used
        state = .awaitingWelcome
        startedAt = now
        lastReceivedAt = now
    }
}
