// Which link carries the session (PROTOCOL.md §4.16), on the client's loop. Links are ranked,
// best first (`SyncClient.Configuration.urls`):
//
//   a link connects, none active                 ─▶ it carries the session (new, or resumed)
//   a link connects, the active one in handshake  ─▶ standby: open and idle, takes over at once
//                                                    if that handshake fails or takes over 3 s
//   a better link connects, the session ready     ─▶ the session moves there once the server
//                                                    resumes it on it; until then the old link
//                                                    carries on (a link that connects but carries
//                                                    nothing costs one handshake timeout)
//   a worse link connects, the session ready      ─▶ closed and halted while a better one carries
//   the active link drops                         ─▶ the move's link, else the best standby,
//                                                    else every other link connects now

import Sockets
import SyncPeer
import SyncProtocol

extension SyncClientCore {
    /// The link the session runs on.
    var link: SyncLink? { active.map { links[$0] } }

    /// The best link first; the others when it cannot connect (`syncLinkDown`).
    func connect() {
        guard !stopped else { return }
        setPhase(.connecting)
        links[0].connectNow()
    }

    func syncLinkConnected(_ link: SyncLink) {
        guard let rank = links.firstIndex(where: { $0 === link }) else { return }
        status.withLock { $0.linksOpened += 1 }
        place(rank)
    }

    /// What an open link that carries nothing does now (see the top of this file).
    func place(_ rank: Int) {
        let link = links[rank]
        guard let active else { return carry(on: rank) }
        guard session?.state == .ready else {
            standby.insert(rank)  // the active link's handshake may still fail
            return
        }
        if rank < active, candidate == nil, var s = session, let hello = s.beginMove(now: Self.nowMillis()) {
            session = s
            candidate = rank
            for case .send(let bytes) in hello { link.send(bytes) }
            return
        }
        if rank < active, candidate == nil {
            // A session that cannot move (not resumable): a new one on the better link.
            let old = links[active]
            self.active = nil
            leaveLink(reason: "moving to a better link (the session cannot move)")
            old.halt()
            old.close(code: SyncCloseCode.normal.rawValue, reason: "moving to a better link")
            return carry(on: rank)
        }
        if rank > active { link.halt() }  // until the active link drops
        link.close(code: SyncCloseCode.normal.rawValue, reason: "another link carries the session")
    }

    /// Runs the session on `links[rank]`: resumes a detached one, else starts one.
    func carry(on rank: Int) {
        let link = links[rank]
        active = rank
        standby.remove(rank)
        refusedOnThisLink = false
        status.withLock { $0.activeURL = link.configuration.url }
        if var s = session, s.state == .detached {
            let actions = s.start(now: Self.nowMillis())
            session = s
            perform(actions)
            scheduleTick()
            return
        }
        startSession()
    }

    func syncLink(_ link: SyncLink, received bytes: [UInt8]) {
        if let candidate, link === links[candidate] { return moveAnswered(bytes) }
        guard link === self.link, var s = session else { return }  // a link the session left, or a standby
        let actions = s.receive(bytes, now: Self.nowMillis())
        session = s
        perform(actions)
        flushUploads()
    }

    /// The answer on the link the session is moving to: on `welcome` the session runs there from
    /// now on (what the answer re-sends goes out on it), and the old link is left.
    func moveAnswered(_ bytes: [UInt8]) {
        guard var s = session, let to = candidate else { return }
        let actions = s.moveAnswered(bytes, now: Self.nowMillis())
        session = s
        let moved = actions.contains { if case .resumed = $0 { true } else if case .connected = $0 { true } else { false } }
        if moved, let from = active {
            let old = links[from]
            peer.presence.linkDown(linkID)
            candidate = nil
            active = to
            status.withLock { $0.activeURL = links[to].configuration.url }
            old.halt()
            old.close(code: SyncCloseCode.linkLeft.rawValue, reason: "moving to a better link")
        }
        perform(actions)
        flushUploads()
    }

    /// Once the session is established on the active link: a better standby link starts a move,
    /// the others are closed (the worse ones halted until the active link drops).
    func settleStandby() {
        for rank in standby.sorted() {
            standby.remove(rank)
            if links[rank].isOpen { place(rank) }
        }
    }

    /// How long the active link's handshake may take while a standby link waits: the standby is
    /// idle on the server, whose own handshake timeout (10 s) would end it if it waited for the
    /// active link's full one (a blackholed LAN and a BLE standby then took turns timing out).
    static let handshakeWithStandbyMillis: UInt64 = 3_000

    /// Drops the active link when its handshake is slow and a standby link is up (it carries next).
    func giveUpSlowHandshake(now: UInt64) {
        guard let s = session, s.state == .awaitingWelcome, standby.contains(where: { links[$0].isOpen }),
              now &- s.startedAt >= Self.handshakeWithStandbyMillis, let link else { return }
        link.close(code: s.isResuming ? SyncCloseCode.linkLeft.rawValue : SyncCloseCode.timeout.rawValue,
                   reason: "no welcome within \(Self.handshakeWithStandbyMillis) ms while another link is up")
    }

    /// The session stops using its link: detached if it can be resumed, else ended (`reason`
    /// goes to `Status.sessionEnds` when a session that was running ends).
    func leaveLink(reason: String) {
        peer.presence.linkDown(linkID)
        let wasRunning = session.map { $0.state == .ready || $0.isResuming } ?? false
        session?.linkClosed()
        if session?.state != .detached {
            if wasRunning { noteSessionEnd(reason) }
            session = nil
            serverSite = nil
        }
        if let t = tickTimer { loop.cancelTimer(t); tickTimer = nil }
    }

    func noteSessionEnd(_ reason: String) {
        status.withLock { s in
            s.sessionEnds.append(reason)
            if s.sessionEnds.count > 8 { s.sessionEnds.removeFirst(s.sessionEnds.count - 8) }
        }
    }

    func syncLinkDown(_ link: SyncLink, reason: String, wasOpen: Bool) {
        guard let rank = links.firstIndex(where: { $0 === link }) else { return }
        standby.remove(rank)
        if let candidate, rank == candidate {
            self.candidate = nil
            session?.moveAbandoned()
            return  // the active link carries on
        }
        let carried = rank == active
        if carried, let to = candidate {
            // The old link went first: the one the session was moving to carries its resume.
            candidate = nil
            active = to
            leaveLink(reason: reason)
            status.withLock { $0.activeURL = links[to].configuration.url }
            if var s = session {
                _ = s.start(now: Self.nowMillis())  // the resume hello is out already
                session = s
                scheduleTick()
            }
            return
        }
        if carried {
            active = nil
            leaveLink(reason: reason)
            status.withLock { $0.activeURL = nil }
            if !stopped {
                if let best = standby.min(), links[best].isOpen {
                    carry(on: best)
                } else {
                    for other in links where other !== link { other.connectNow() }
                }
            }
        } else if active != nil || links.contains(where: { $0.isOpen }) {
            return  // a standby link's attempt: its own backoff goes on
        } else if !stopped {
            // Nothing carries the session and this link failed: try the others now.
            for other in links where other !== link && !other.isActive { other.connectNow() }
        }
        status.withLock { s in
            s.caughtUp = false
            if s.phase != .failed && !refusedOnThisLink { s.lastError = reason }
            if s.phase == .connected { s.phase = .connecting }
        }
        if stopped { return setPhase(.stopped) }
        if links.allSatisfy(\.halted), status.withLock({ $0.phase != .failed }) {
            // `maxConnectAttempts` failures in a row.
            status.withLock { $0.phase = .failed; $0.lastError = reason }
        }
    }
}
