import BigPeerTestSupport
import Glibc
import Sockets
import SyncPeer
import SyncProtocol
import Testing

/// `PacketSyncLink` on one end of an AF_UNIX SEQPACKET socket pair (the stand-in for an L2CAP
/// channel); the test plays the other end with plain blocking calls, SDU by SDU.
@Suite struct PacketSyncLinkTests {
    /// The link's end, the test's raw end, and what the link reported.
    final class Harness: Sendable {
        let group: EventLoopGroup
        let loop: EventLoop
        let raw: Int32
        let clock = MutexBox(NanoTime(nanoseconds: 1_000_000_000))
        let received = MutexBox<[[UInt8]]>([])
        let closedReason = MutexBox<String?>(nil)
        let drains = MutexBox(0)
        private let held = MutexBox<LoopBound<PacketSyncLink>?>(nil)

        init(mtu: Int, maxMessageSize: Int = 1 << 20, credit: Int = .max) async throws {
            group = try EventLoopGroup(threads: 1)
            loop = group.next()
            var pair: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
                throw IOError(call: "socketpair", errno: errno)
            }
            raw = pair[1]
            _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)  // the link's end, as accept4 gives it
            var timeout = timeval(tv_sec: 30, tv_usec: 0)  // bounds a failure only
            setsockopt(raw, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var configuration = PacketSyncLink.Configuration(maxMessageSize: maxMessageSize)
            configuration.keepaliveInterval = .seconds(5)
            configuration.supervisionTimeout = .seconds(20)
            let clock = self.clock
            configuration.clock = { clock.withLock { $0 } }
            let (received, closedReason, drains, loop, fd, linkConfiguration) = (self.received, self.closedReason, self.drains, self.loop, pair[0], configuration)
            let link = try await loop.submit { () throws -> LoopBound<PacketSyncLink> in
                let callbacks = PacketSyncLink.Callbacks(
                    connected: {}, received: { m in received.withLock { $0.append(m) } }, drained: { drains.withLock { $0 += 1 } },
                    closed: { close in closedReason.withLock { $0 = close.description } })
                let link = try PacketSyncLink.accepted(fd: fd, address: .unixStandIn(path: "pair"), options: PacketSocketOptions(standInMTU: mtu),
                                                       configuration: linkConfiguration, loop: loop, credit: credit, callbacks: callbacks)
                return LoopBound(link, loop: loop)
            }
            held.withLock { $0 = link }
        }

        func onLink<T: Sendable>(_ body: @escaping @Sendable (PacketSyncLink) -> T) async throws -> T {
            let link = try #require(held.withLock { $0 })
            return try await loop.submit { body(link.value) }
        }

        func advance(_ d: Duration) { clock.withLock { $0 = $0.adding(d) } }

        func rawSend(_ sdu: [UInt8]) { _ = sdu.withUnsafeBytes { send(raw, $0.baseAddress, $0.count, 0) } }

        /// The next SDU the link sent; nil at EOF.
        func rawReceive() -> [UInt8]? {
            var buf = [UInt8](repeating: 0, count: 70_000)
            let n = buf.withUnsafeMutableBytes { recv(raw, $0.baseAddress, $0.count, 0) }
            return n > 0 ? Array(buf[0..<n]) : nil
        }

        func shutdown() {
            close(raw)
            group.shutdown()
        }
    }

    @Test func messagesGoOutInSDUsOfTheMTUAndComeBackWhole() async throws {
        let h = try await Harness(mtu: 64)
        defer { h.shutdown() }
        let message = (0..<1000).map { UInt8(truncatingIfNeeded: $0) }
        try await h.onLink { $0.send(message) }
        var sdus: [[UInt8]] = []
        var assembler = PacketAssembler(maxMessageSize: 1 << 20)
        while true {
            let sdu = try #require(h.rawReceive())
            sdus.append(sdu)
            if try assembler.feed(sdu) == .message(message) { break }
        }
        #expect(sdus.count == 16 && sdus.dropLast().allSatisfy { $0.count == 64 })
        for sdu in PacketFraming.sdus(message, mtu: 64) { h.rawSend(sdu) }
        #expect(await eventually { h.received.withLock { $0 } == [message] })
        let (counters, channel) = try await h.onLink { ($0.counters, $0.channelCounters) }
        #expect(counters.messagesSent == 1 && counters.messagesReceived == 1)
        #expect(channel.sdusSent == 16 && channel.sdusReceived == 16 && channel.bytesSent == 1004)
    }

    /// A peer that does not read: SDUs wait in the link's queue (as for a peer without credits),
    /// a drain request is pending, and once the peer reads the queue empties and the drain is told.
    @Test func aPeerThatDoesNotReadBacksTheQueueUpUntilItReads() async throws {
        let h = try await Harness(mtu: 64)
        defer { h.shutdown() }
        let message = [UInt8](repeating: 7, count: 1000)
        let queued = try await h.onLink { link -> (Int, Bool) in
            for _ in 0..<200 { link.send(message) }  // 200 KB in 64-byte SDUs: more than the socket takes
            return (link.queuedBytes, link.requestDrainNotification())
        }
        #expect(queued.0 > 16 << 10 && queued.1, "\(queued)")
        var assembler = PacketAssembler(maxMessageSize: 1 << 20)
        var messages = 0
        while messages < 200, let sdu = h.rawReceive() {
            if case .message(let m) = try assembler.feed(sdu) { #expect(m == message); messages += 1 }
        }
        #expect(messages == 200)
        #expect(await eventually { h.drains.withLock { $0 } == 1 })
        #expect(try await h.onLink { $0.queuedBytes } == 0)
    }

    @Test func anOversizedFirstSDUClosesWithMessageTooLarge() async throws {
        let h = try await Harness(mtu: 64, maxMessageSize: 1000)
        defer { h.shutdown() }
        h.rawSend([0, 0, 0x03, 0xE9, 1, 2, 3])  // 1001 bytes announced
        var assembler = PacketAssembler(maxMessageSize: 1 << 20)
        var bye: [UInt8]?
        while let sdu = h.rawReceive() {
            if case .message(let m) = try assembler.feed(sdu) { bye = m }
        }
        let message = try SyncMessageDecoder.decode(try #require(bye))
        guard case .bye(let code, _) = message else { Issue.record("not bye: \(message)"); return }
        #expect(code == SyncCloseCode.messageTooLarge.rawValue)
        #expect(await eventually { h.closedReason.withLock { $0 } != nil })
        #expect(h.received.withLock { $0 }.isEmpty)
    }

    @Test func idleLinksSendKeepalivesAndSilenceEndsThem() async throws {
        let h = try await Harness(mtu: 64)
        defer { h.shutdown() }
        h.advance(.seconds(4))
        try await h.onLink { $0.checkSupervision() }
        h.advance(.seconds(1))  // 5 s without sending
        try await h.onLink { $0.checkSupervision() }
        #expect(h.rawReceive() == PacketFraming.keepalive)
        h.rawSend(PacketFraming.keepalive)  // the peer's keepalive counts as hearing from it
        #expect(await eventually { (try? await h.onLink { $0.counters.keepalivesReceived }) == 1 })
        h.advance(.seconds(19))  // 24 s since the start, 19 since the peer's keepalive
        try await h.onLink { $0.checkSupervision() }
        #expect(try await h.onLink { $0.isOpen })
        h.advance(.seconds(1))
        try await h.onLink { $0.checkSupervision() }
        #expect(await eventually { h.closedReason.withLock { $0 } != nil })
        #expect(h.closedReason.withLock { $0 }?.hasPrefix("link lost: nothing received for 20") == true)
        while let sdu = h.rawReceive() { #expect(sdu == PacketFraming.keepalive) }  // no bye: the link is gone
    }

    /// A consumer without credit stops the channel being read, so the peer's keepalives wait
    /// unread: that silence is ours, and supervision does not count it; once the consumer reads
    /// again the held message is delivered and the timeout runs from then.
    @Test func silenceWhileTheConsumerHasNoCreditIsNotLoss() async throws {
        let h = try await Harness(mtu: 64, credit: 0)
        defer { h.shutdown() }
        let message = [UInt8](repeating: 9, count: 100)
        for sdu in PacketFraming.sdus(message, mtu: 64) { h.rawSend(sdu) }
        h.advance(.seconds(30))
        try await h.onLink { $0.checkSupervision() }
        #expect(try await h.onLink { $0.isOpen })
        #expect(h.received.withLock { $0 }.isEmpty)
        try await h.onLink { $0.grantCredit(.max) }
        #expect(await eventually { h.received.withLock { $0 } == [message] })
        h.advance(.seconds(19))
        try await h.onLink { $0.checkSupervision() }
        #expect(try await h.onLink { $0.isOpen })
        h.advance(.seconds(1))
        try await h.onLink { $0.checkSupervision() }
        #expect(await eventually { h.closedReason.withLock { $0 } != nil })
    }
}
