// Moving a resumable session to another link (PROTOCOL.md §4.16).
//
//   link B: hello{resume: tok, rx} ─▶ connection B: credentials, policy ─▶ .resume(tok, rx)
//        ─▶ ResumableSessions[tok] = connection A ─▶ A.adopt(B's transport, rx):
//             under A's lock: the old link (if any) is left and closed, B's is attached,
//             `welcome{rx, tok}` and the messages after rx go out on B
//        ─▶ B hands over: its input (messages, close, drain) goes to A, tagged with B's link
//
// Connection A drops input tagged with a link it has left, so a late message or close from the
// old link cannot reach the session. Not found (expired, another instance, another peer's site or
// credentials of another identity):
// B answers `.resumeNotFound` to its own session, which welcomes the peer into a new one.

import Synchronization
import SyncProtocol

extension SyncConnection {
    struct Attachment: Sendable {
        var transport: Transport?
        var link: UInt64
    }

    static let linkNumbers = Atomic<UInt64>(0)

    /// Input from this connection's own link: to the session it was handed to, if any.
    func fromOwnLink(_ input: SyncSessionInput) {
        if let target = handedOver.withLock({ $0 }) {
            // Dropped only while the handover is under way (not attached yet): remember a close.
            if !target.deliver(input, via: ownLink), case .transportClosed = input { closedDuringHandover.store(true, ordering: .relaxed) }
            return
        }
        deliver(input, via: ownLink)
    }

    /// `.resume`: find the session and give it this link; else a new session here.
    func handOver(_ request: ResumeRequest, site: UInt64) {
        guard let target = resumable?.find(request.token), target !== self,
              let transport = attachment.withLock({ $0.transport }) else {
            deliver(.resumeNotFound)
            return
        }
        let principal = session.withLock { $0.permissions.principal }
        let maxQueuedBytes = session.withLock { $0.configuration.maxQueuedBytes }
        // This link's input goes to the target before `adopt` writes the welcome: the peer answers
        // it at once (replays, subscriptions), and an answer that reached this connection's own
        // session, still authenticating, would be dropped with it. The target holds such input
        // under its lock until `adopt` has attached this link.
        handedOver.withLock { $0 = target }
        guard target.adopt(transport, link: ownLink, peerReceived: request.received, site: site, principal: principal,
                           maxQueuedBytes: maxQueuedBytes, linkType: presence?.linkType) else {
            // Nothing was written, so the peer has sent nothing since its hello but maybe a close.
            handedOver.withLock { $0 = nil }
            deliver(.resumeNotFound)
            if closedDuringHandover.load(ordering: .relaxed) { deliver(.transportClosed, via: ownLink) }
            return
        }
        // A close that came before `adopt` attached this link.
        if closedDuringHandover.load(ordering: .relaxed) { target.deliver(.transportClosed, via: ownLink) }
        // This connection's own session never started: no welcome went out, nothing to close.
        session.withLock { _ = $0.handle(.transportClosed, now: clock()) }
        stop()
    }

    /// Runs this session on `transport` from now on (see the top of this file). False when it
    /// cannot be resumed (closed, another site, a count outside what was sent).
    /// `maxQueuedBytes`: the new link's queue limit (a BLE channel holds less than a LAN socket).
    /// `linkType`: the new link's kind, for presence.
    func adopt(_ transport: Transport, link: UInt64, peerReceived: UInt64, site: UInt64, principal: String?, maxQueuedBytes: Int,
               linkType: LinkType? = nil) -> Bool {
        let left = session.withLock { s -> Transport?? in
            guard s.peer?.site == site, let actions = s.resume(peerReceived: peerReceived, principal: principal, now: clock()) else { return nil }
            s.configuration.maxQueuedBytes = maxQueuedBytes
            let old = attachment.withLock { a -> Transport? in
                defer { a = Attachment(transport: transport, link: link) }
                return a.transport
            }
            Self.write(actions, to: transport)
            return .some(old)
        }
        guard let left else { return false }
        if let type = linkType, let hello = session.withLock({ $0.peer }) { presence?.moved(hello, type) }
        left?.close(SyncCloseCode.linkLeft.rawValue, "the session was resumed on another link")
        deliver(.transportDrained)  // the pump goes on, now that there is a link again
        return true
    }
}

/// The resumable sessions of one instance by token (PROTOCOL.md §4.16). Entries are removed when
/// their session ends; the tokens are 128 random bits, so finding one is knowing it.
public final class ResumableSessions: Sendable {
    private let sessions = Mutex<[[UInt8]: SyncConnection]>([:])

    public init() {}

    func register(_ token: [UInt8], _ connection: SyncConnection) { sessions.withLock { $0[token] = connection } }

    func remove(_ token: [UInt8], _ connection: SyncConnection) {
        sessions.withLock { s in if s[token] === connection { s[token] = nil } }
    }

    func find(_ token: [UInt8]) -> SyncConnection? { sessions.withLock { $0[token] } }

    public var count: Int { sessions.withLock { $0.count } }
}
