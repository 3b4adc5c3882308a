import BigPeerTestSupport
import CRDT
import Foundation
@testable import SmallPeer
import Synchronization
@testable import Sync
import SyncProtocol
import Testing

/// `SyncConnection`'s handover of a resumed session to its new link (PROTOCOL.md §4.16), with the
/// connections of two links to one served small peer and transports the test controls.
@Suite struct SessionHandoverTests {
    /// What a transport was given: the messages, and the close.
    final class Wire: Sendable {
        let sent = Mutex<[SyncMessage]>([])
        let closed = Mutex<UInt16?>(nil)
        /// Runs once, on the first message sent (inside the session's lock: must not block on it).
        let onFirstSend = Mutex<(@Sendable () -> Void)?>(nil)

        var transport: SyncConnection.Transport {
            SyncConnection.Transport(send: { bytes in
                if let m = try? SyncMessageDecoder.decode(bytes) { self.sent.withLock { $0.append(m) } }
                self.onFirstSend.withLock { f in defer { f = nil }; return f }?()
            }, close: { code, _ in self.closed.withLock { $0 = code } })
        }

        var messages: [SyncMessage] { sent.withLock { $0 } }
        func first<T>(_ pick: (SyncMessage) -> T?) -> T? { messages.lazy.compactMap(pick).first }
    }

    static func hello(resume: ResumeRequest?) -> [UInt8] {
        var h = Hello(site: 77, peerKey: [7], deviceName: "mover", credentials: .apiKey("k"), credit: 1 << 20, maxMessageSize: 1 << 20)
        h.capabilities = [SyncCapability.resume]
        h.resume = resume
        return SyncMessage.hello(h).encode()
    }

    static func connection(_ peer: SmallPeer, _ wire: Wire, _ sessions: ResumableSessions) -> SyncConnection {
        // A clock that stands still: no handshake or heartbeat timeout can end a session while the
        // credential check waits for a thread of the cooperative pool, which a full parallel test
        // run on two cores kept busy for more than the 10 s handshake timeout (closed 4008).
        let c = SyncConnection(configuration: SyncSession.Configuration(serverSite: peer.siteID.rawValue, sessionID: "handover"),
                               storage: PeerSyncStorage(peer: peer), transport: wire.transport, clock: { 1 },
                               resumable: sessions) { _ in .accept(.everything) }
        c.start()
        return c
    }

    /// The peer answers the welcome of a resume at once; the answer may reach the new link's
    /// connection while `handOver` is still running on another thread. It must reach the resumed
    /// session, not the new link's own (still authenticating) one, which ends with the handover.
    @Test func whatThePeerSendsRightAfterTheResumeWelcomeReachesTheResumedSession() async throws {
        let dir = TempDirectory("handover")
        defer { dir.cleanup() }
        let peer = try openPeer(dir.path)
        let sessions = ResumableSessions()

        let first = Wire()
        let a = Self.connection(peer, first, sessions)
        a.receive(Self.hello(resume: nil))
        #expect(await eventually(within: .seconds(180)) { first.first { if case .welcome(let w) = $0 { w } else { nil } } != nil },
                "session \(a.state), sent \(first.messages), closed \(String(describing: first.closed.withLock { $0 }))")
        let token = try #require(first.first { if case .welcome(let w) = $0 { w.resumeToken } else { nil } })
        a.transportClosed()  // detached: waits for the peer on another link

        let second = Wire()
        let b = Self.connection(peer, second, sessions)
        let answered = DispatchSemaphore(value: 0)
        second.onFirstSend.withLock {
            $0 = {
                // The welcome is going out: the peer's answer arrives on the link's own thread.
                Thread.detachNewThread {
                    b.receive(SyncMessage.ping(41).encode())
                    answered.signal()
                }
                // Without the fix this returns as soon as the ping reached (and was lost in) the new
                // link's own session; with it the ping waits for the session's lock, held here.
                _ = answered.wait(timeout: .now() + .milliseconds(300))
            }
        }
        b.receive(Self.hello(resume: ResumeRequest(token: token, received: 0)))
        #expect(await eventually(within: .seconds(180)) {
            second.first { if case .pong(41) = $0 { true } else { nil } } ?? false
        }, "the resumed session answered the ping sent right after its welcome: \(second.sent.withLock { $0 })")
        guard case .welcome(let w)? = second.sent.withLock({ $0.first }) else { Issue.record("no welcome first"); return }
        #expect(w.resumedReceived != nil, "resumed, not a new session")
        #expect(second.closed.withLock { $0 } == nil)
    }
}
