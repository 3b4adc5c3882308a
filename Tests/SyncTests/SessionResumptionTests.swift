import Testing
@testable import Sync
@testable import SyncPeer
@testable import SyncProtocol

/// PROTOCOL.md §4.16 on the sans-I/O pieces: the replay buffer, the server session's handshake,
/// detach and resume, and the peer session's side.
@Suite struct SessionResumptionTests {
    @Test func theReplayBufferKeepsWhatWasNotConfirmed() throws {
        var r = SessionResumption(token: Array(repeating: 7, count: 16))
        for i in 0..<200 { r.recordSent([UInt8(truncatingIfNeeded: i), 0, 0]) }
        #expect(r.sent == 200 && r.unconfirmedBytes == 600)
        try r.confirm(150)
        #expect(r.unconfirmedBytes == 150 && r.confirmed == 150)
        let replay = try r.replay(after: 190)
        #expect(replay.map { $0[0] } == (190..<200).map { UInt8($0) })
        #expect(throws: SessionResumption.ConfirmError.self) { try r.confirm(100) }  // below an earlier confirmation
        #expect(throws: SessionResumption.ConfirmError.self) { try r.confirm(201) }  // beyond what was sent
        #expect(try r.replay(after: 200).isEmpty)
    }

    @Test func racksAreDueEverySixteenMessagesOr32KiB() {
        var r = SessionResumption(token: [])
        var due: [Bool] = []
        for _ in 0..<16 { due.append(r.noteReceived(size: 10)) }
        #expect(due == Array(repeating: false, count: 15) + [true])
        let rack = r.takeRack()
        #expect(rack == .received(16))
        let large = r.noteReceived(size: 40_000)
        #expect(large, "one large message is enough")
    }

    static func resumableHello(_ resume: ResumeRequest? = nil) -> Hello {
        var h = SessionHarness.hello()
        h.capabilities = [SyncCapability.resume]
        h.resume = resume
        return h
    }

    /// A resumable server session that sent `count` pings' worth of numbered messages.
    static func readyResumable() -> (SessionHarness, [UInt8]) {
        var h = SessionHarness(configure: { $0.resumable = true })
        _ = h.receive(.hello(resumableHello()))
        let welcome = sent(h.feed(.authenticated(.accept(.everything))))
        guard case .welcome(let w)? = welcome.first, let token = w.resumeToken else {
            Issue.record("no token in \(welcome)")
            return (h, [])
        }
        #expect(w.resumedReceived == nil && token.count == 16)
        return (h, token)
    }

    @Test func withoutTheCapabilityThereIsNoToken() {
        var h = SessionHarness(configure: { $0.resumable = true })
        _ = h.receive(.hello(SessionHarness.hello()))
        guard case .welcome(let w)? = sent(h.feed(.authenticated(.accept(.everything)))).first else { Issue.record("no welcome"); return }
        #expect(w.resumeToken == nil)
        _ = h.feed(.transportClosed)
        #expect(h.session.state == .closed, "a session that cannot be resumed ends with its link")
    }

    @Test func aDetachedSessionWaitsThenTimesOut() {
        var (h, _) = Self.readyResumable()
        _ = h.feed(.transportClosed)
        #expect(h.session.state == .ready && h.session.detached)
        #expect(sent(h.advance(25_000)).isEmpty, "no ping goes out without a link")
        #expect(closeCode(h.advance(40_000)) == SyncCloseCode.timeout.rawValue, "3 heartbeats without the peer end it")
    }

    @Test func resumeReplaysWhatThePeerDidNotReceive() throws {
        var (h, token) = Self.readyResumable()
        _ = h.receive(.ping(1))  // numbered: the server has 1 from the peer
        _ = h.receive(.ping(2))
        let pongs = h.session.resumption?.sent ?? 0
        #expect(pongs == 2)
        _ = h.feed(.transportClosed)
        _ = h.advance(20_001)  // no ping while detached
        var beyond = h.session
        #expect(beyond.resume(peerReceived: 5, principal: nil, now: h.now) == nil, "a count beyond what was sent cannot resume")
        var other = h.session
        #expect(other.resume(peerReceived: 1, principal: "someone-else", now: h.now) == nil, "credentials of another identity cannot take the session")
        let resumed = h.session.resume(peerReceived: 1, principal: nil, now: h.now)
        let actions = try #require(resumed)
        guard case .send(_, .welcome(let w))? = actions.first else { Issue.record("\(actions)"); return }
        #expect(w.resumedReceived == 2 && w.resumeToken == token)
        let resent = actions.compactMap { if case .resend(let b) = $0 { b } else { nil } }
        #expect(resent == [SyncMessage.pong(2).encode()], "only the pong the peer missed")
        #expect(!h.session.detached)
    }

    @Test func aRackConfirmsAndABadOneIsAViolation() {
        var (h, _) = Self.readyResumable()
        _ = h.receive(.ping(1))
        #expect(h.session.resumption?.unconfirmedBytes ?? 0 > 0)
        _ = h.receive(.received(1))
        #expect(h.session.resumption?.unconfirmedBytes == 0)
        #expect(closeCode(h.receive(.received(9))) == SyncCloseCode.protocolViolation.rawValue)
    }

    @Test func aResumeHelloIsHandedToTheDriverAfterTheCredentials() {
        var h = SessionHarness(configure: { $0.resumable = true })
        let request = ResumeRequest(token: Array(repeating: 1, count: 16), received: 3)
        _ = h.receive(.hello(Self.resumableHello(request)))
        let a = h.feed(.authenticated(.accept(.everything)))
        #expect(a == [.resume(request, site: SessionHarness.peerSite)])
        guard case .welcome(let w)? = sent(h.feed(.resumeNotFound)).first else { Issue.record("no welcome"); return }
        #expect(w.resumedReceived == nil && w.resumeToken != nil, "not found: a new resumable session")
    }

    // MARK: - The peer's side

    typealias Peer = SyncClientSession<TestUpload>
    struct TestUpload: SyncUpload { var ref: DocumentRef; var delta: [UInt8] }

    /// A resumable peer welcomed with token 3…3 whose link dropped, its resume `hello` sent on the next link at time 2.
    static func peerResumingOnASecondLink() -> Peer {
        var c = Peer.Configuration(site: 9, peerKey: [1], deviceName: "p", credentials: nil)
        c.resumable = true
        var p = Peer(configuration: c)
        _ = p.start(now: 0)
        _ = p.receive(SyncMessage.welcome(Welcome(site: 1, sessionID: "s", heartbeatMillis: 20_000, maxMessageSize: 1 << 20,
                                                 credit: 1 << 20, resumeToken: Array(repeating: 3, count: 16))).encode(), now: 1)
        p.linkClosed()
        _ = p.start(now: 2)
        return p
    }

    /// Pongs are numbered and need no credit: a peer that pings and never racks is cut off, not buffered for.
    @Test func aPeerThatNeverRacksIsClosedAtTheBound() {
        var h = SessionHarness(configure: { $0.resumable = true; $0.maxQueuedBytes = 1024 })
        _ = h.receive(.hello(Self.resumableHello()))
        _ = h.feed(.authenticated(.accept(.everything)))
        var code: UInt16?
        for n in 0..<20_000 where code == nil { code = closeCode(h.receive(.ping(UInt64(n)))) }
        #expect(code == SyncCloseCode.protocolViolation.rawValue)
        #expect((h.session.resumption?.unconfirmedBytes ?? 0) <= h.session.maxUnconfirmedBytes + 64)
    }

    @Test func thePeerDetachesAndResumesWithItsCount() throws {
        var c = Peer.Configuration(site: 9, peerKey: [1], deviceName: "p", credentials: nil)
        c.resumable = true
        var p = Peer(configuration: c)
        _ = p.start(now: 0)
        let token = Array(repeating: UInt8(3), count: 16)
        _ = p.receive(SyncMessage.welcome(Welcome(site: 1, sessionID: "s", heartbeatMillis: 20_000, maxMessageSize: 1 << 20,
                                                 credit: 1 << 20, resumeToken: token)).encode(), now: 1)
        _ = p.receive(SyncMessage.ping(1).encode(), now: 2)  // answered with a numbered pong
        _ = p.receive(SyncMessage.ping(2).encode(), now: 3)
        p.linkClosed()
        #expect(p.state == .detached)
        let hello = p.start(now: 4)
        guard case .send(let bytes)? = hello.first, case .hello(let h) = try SyncMessageDecoder.decode(bytes, limits: .default) else {
            Issue.record("\(hello)"); return
        }
        #expect(h.resume == ResumeRequest(token: token, received: 2))
        let resumed = p.receive(SyncMessage.welcome(Welcome(site: 1, sessionID: "s", heartbeatMillis: 20_000, maxMessageSize: 1 << 20,
                                                           credit: 0, resumeToken: token, resumedReceived: 1)).encode(), now: 5)
        guard case .resumed? = resumed.first else { Issue.record("\(resumed)"); return }
        #expect(Array(resumed.dropFirst()) == [.send(SyncMessage.pong(2).encode())], "the pong the server missed, once")
        #expect(p.state == .ready && p.linksUsed == 2)
    }

    /// The server may already run the session on the link whose welcome is late: the peer leaves
    /// that link with 4010 (the session goes on) instead of ending the session with 4008.
    @Test func aResumeWithoutWelcomeLeavesTheLinkNotTheSession() throws {
        var p = Self.peerResumingOnASecondLink()
        let actions = p.tick(now: 2 + p.configuration.handshakeTimeoutMillis)
        guard case .send(let bytes)? = actions.first, case .bye(let code, _) = try SyncMessageDecoder.decode(bytes, limits: .default) else {
            Issue.record("\(actions)"); return
        }
        #expect(code == SyncCloseCode.linkLeft.rawValue)
        p.linkClosed()
        #expect(p.state == .detached, "the session waits for the next link")
    }

    @Test func aResumeTheServerRefusesStartsOver() {
        var p = Self.peerResumingOnASecondLink()
        let fresh = p.receive(SyncMessage.welcome(Welcome(site: 1, sessionID: "s2", heartbeatMillis: 20_000, maxMessageSize: 1 << 20,
                                                         credit: 1 << 20, resumeToken: Array(repeating: 4, count: 16))).encode(), now: 3)
        guard case .connected(let w)? = fresh.first else { Issue.record("\(fresh)"); return }
        #expect(w.sessionID == "s2" && p.resumption?.token == Array(repeating: 4, count: 16) && p.resumption?.sent == 0)
    }
}
