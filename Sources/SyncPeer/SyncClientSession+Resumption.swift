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

    /// Starts moving a ready session to a better link while the current one still carries it:
    /// the `hello` to send on the new link. Its answer goes to `moveAnswered`; if the new link
    /// fails first, `moveAbandoned`. Nil when the session cannot move (not resumable, not ready,
    /// a move already under way).
    public mutating func beginMove(now: UInt64) -> [Action]? {
        guard state == .ready, let r = resumption, resumeSentAt == nil else { return nil }
        resumeSentAt = r.received
        movingSince = now
        return [.send(SyncMessage.hello(hello(resume: ResumeRequest(token: r.token, received: r.received))).encode())]
    }

    /// The first message on the link the session is moving to (`welcome` or `refuse`).
    public mutating func moveAnswered(_ bytes: [UInt8], now: UInt64) -> [Action] {
        guard resumeSentAt != nil else { return [] }
        let message: SyncMessage
        do { message = try SyncMessageDecoder.decode(bytes, limits: limits) } catch {
            moveAbandoned()
            return [.moveFailed(reason: error.description)]
        }
        switch message {
        case .welcome(let w) where w.resumedReceived != nil:
            return resumed(w, serverReceived: w.resumedReceived ?? 0, now: now)
        case .welcome(let w):
            // The server no longer has the session: the new link carries a new one.
            startOver(now: now)
            return receive(SyncMessage.welcome(w).encode(), now: now)
        case .refuse(let code, let reason):
            moveAbandoned()
            return [.moveFailed(reason: "refused (\(code)): \(reason)")]
        default:
            moveAbandoned()
            return [.moveFailed(reason: "\(message.typeName) before welcome")]
        }
    }

    /// The link the session was moving to failed before its `welcome`: it stays where it is.
    public mutating func moveAbandoned() {
        resumeSentAt = nil
        movingSince = nil
    }

    /// Gives up the link this resume went out on, without ending the session: `bye` 4010 then
    /// close; `linkClosed` then detaches the session again.
    mutating func leaveLink(_ reason: String) -> [Action] {
        let r = limits.closeReason(reason)
        return [.send(SyncMessage.bye(code: SyncCloseCode.linkLeft.rawValue, reason: r).encode()),
                .close(code: SyncCloseCode.linkLeft.rawValue, reason: r)]
    }

    /// The `hello` on the current link asks to resume and its `welcome` has not come yet.
    public var isResuming: Bool { state == .awaitingWelcome && resuming }

    /// A move is under way (a `hello` with `resume` went out on another link).
    public var isMoving: Bool { state == .ready && resumeSentAt != nil }

    /// The server resumed the session: send again what it did not receive.
    mutating func resumed(_ w: Welcome, serverReceived: UInt64, now: UInt64) -> [Action] {
        guard var r = resumption else { return fail(SyncCloseCode.protocolViolation.rawValue, "welcome resumes a session this peer did not have") }
        let replay: ArraySlice<[UInt8]>
        do { replay = try r.replay(after: serverReceived) } catch {
            return fail(SyncCloseCode.protocolViolation.rawValue, "welcome rx \(serverReceived): \(error)")
        }
        resumption = r
        skipIncoming = r.received - (resumeSentAt ?? r.received)
        resumeSentAt = nil
        movingSince = nil
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
