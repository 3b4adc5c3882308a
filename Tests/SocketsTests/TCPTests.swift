import BigPeerTestSupport
import Foundation
import Glibc
import Synchronization
import Testing
@testable import Sockets

/// A delegate that forwards events to closures (tests only).
final class ClosureDelegate: ConnectionDelegate {
    var onReady: (TCPConnection) -> Void = { _ in }
    var onRead: (TCPConnection, [UInt8]) -> Void = { _, _ in }
    var onDrain: (TCPConnection) -> Void = { _ in }
    var onClose: (TCPConnection, (any Error)?) -> Void = { _, _ in }
    func connectionIsReady(_ c: TCPConnection) { onReady(c) }
    func connection(_ c: TCPConnection, didRead bytes: UnsafeRawBufferPointer) { onRead(c, Array(bytes)) }
    func connectionDidDrain(_ c: TCPConnection) { onDrain(c) }
    func connectionDidClose(_ c: TCPConnection, error: (any Error)?) { onClose(c, error) }
}

/// Holds loop-owned objects alive for the duration of a test.
final class Keeper: @unchecked Sendable {  // touched only on the test's loop (via submit/execute)
    var objects: [AnyObject] = []
}

/// A listener on `loop` (any free port) whose accepted connections hand every read to `onRead`;
/// returns its port. Listener and connections stay alive in `keep`.
func startListener(ip: String = "127.0.0.1", on loop: EventLoop, keep: Keeper,
                   onRead: @escaping @Sendable (TCPConnection, [UInt8]) -> Void) async throws -> Int {
    try await loop.submit { () throws -> Int in
        let l = try TCPListener(address: try SocketAddress(ip: ip, port: 0), loop: loop) { fd, remote in
            do {
                let c = try TCPConnection(acceptedFD: fd, remoteAddress: remote, loop: loop)
                let d = ClosureDelegate()
                d.onRead = onRead
                c.delegate = d
                keep.objects.append(c)
                try c.start()
            } catch { Issue.record("accept setup: \(error)") }
        }
        keep.objects.append(l)
        return l.localAddress.port
    }
}

@Suite struct TCPTests {
    /// An echo server on `address` (loop A) and a client (loop B) that sends `payload` as several
    /// writes of different sizes (copied, queued whole, gathered by sendmsg) and reads it back.
    private func echoRoundTrip(ip: String, payload: [UInt8]) async throws -> [UInt8] {
        let group = try EventLoopGroup(threads: 2)
        defer { group.shutdown() }
        let (server, client) = (group.loops[0], group.loops[1])
        let keep = Keeper()
        let port = try await startListener(ip: ip, on: server, keep: keep) { c, bytes in c.write(bytes) }
        let received = Mutex<[UInt8]>([])
        let target = try SocketAddress(ip: ip, port: port)
        let expected = payload.count
        return try await withCheckedThrowingContinuation { (done: CheckedContinuation<[UInt8], any Error>) in
            client.execute {
                let d = ClosureDelegate()
                var finished = false
                d.onReady = { c in
                    // Small, large and small again: exercises staging copy and gathered writes.
                    c.write(Array(payload[0..<10]))
                    c.write(Array(payload[10..<(expected - 10)]))
                    c.write(copying: UnsafeRawBufferPointer(rebasing: payload.withUnsafeBytes { $0 }[(expected - 10)...]))
                }
                d.onRead = { c, bytes in
                    let total = received.withLock { $0.append(contentsOf: bytes); return $0.count }
                    if total >= expected && !finished { finished = true; c.close(); done.resume(returning: received.withLock { $0 }) }
                }
                d.onClose = { _, error in
                    if !finished { finished = true; done.resume(throwing: error ?? IOError(call: "closed early", errno: 0)) }
                }
                do {
                    let c = try TCPConnection.connect(to: target, loop: client, delegate: d)
                    keep.objects.append(c)
                } catch { done.resume(throwing: error) }
            }
        }
    }

    @Test func echoOverIPv4() async throws {
        // Deterministic, non-repeating-looking bytes (a 32-bit LCG).
        var x: UInt32 = 12345
        let payload = (0..<300_000).map { _ -> UInt8 in x = x &* 1_664_525 &+ 1_013_904_223; return UInt8(truncatingIfNeeded: x >> 24) }
        #expect(try await echoRoundTrip(ip: "127.0.0.1", payload: payload) == payload)
    }

    @Test func echoOverIPv6() async throws {
        let payload = (0..<50_000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        #expect(try await echoRoundTrip(ip: "::1", payload: payload) == payload)
    }

    @Test func invalidAddressesAreTypedErrors() {
        #expect(throws: IOError.self) { try SocketAddress(ip: "300.1.1.1", port: 1) }
        #expect(throws: IOError.self) { try SocketAddress(ip: "::g", port: 1) }
        #expect(throws: IOError.self) { try SocketAddress(ip: "127.0.0.1", port: 70000) }
    }

    /// A peer that never reads: the writer sees backpressure, then past the drop limit the
    /// connection closes with ENOBUFS and its queue is freed.
    @Test func peerThatNeverReadsIsDroppedPastTheLimit() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let keep = Keeper()
        let port = try await loop.submit { () throws -> Int in
            let l = try TCPListener(address: try SocketAddress(ip: "127.0.0.1", port: 0), loop: loop) { _, _ in }
            keep.objects.append(l)
            return l.localAddress.port
        }
        // A plain blocking client socket that never reads (accepted by the kernel backlog).
        let peer = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(peer) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(peer, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }

        let outcome: (sawBackpressure: Bool, errno: Int32?) = try await withCheckedThrowingContinuation { done in
            loop.execute {
                do {
                    var limits = WriteLimits()
                    limits.highWaterMark = 64 * 1024
                    limits.dropLimit = 2 * 1024 * 1024
                    let d = ClosureDelegate()
                    var sawBackpressure = false
                    d.onClose = { _, error in done.resume(returning: (sawBackpressure, (error as? IOError)?.errno)) }
                    let c = try TCPConnection.connect(to: try SocketAddress(ip: "127.0.0.1", port: port), loop: loop, delegate: d)
                    c.limits = limits
                    keep.objects.append(c)
                    d.onReady = { c in
                        let piece = [UInt8](repeating: 1, count: 256 * 1024)
                        for _ in 0..<200 where !c.isClosed {
                            c.write(piece)
                            if c.isBackpressured { sawBackpressure = true }
                        }
                    }
                } catch { done.resume(throwing: error) }
            }
        }
        #expect(outcome.sawBackpressure)
        #expect(outcome.errno == ENOBUFS)
    }

    /// One write larger than the drop limit, to a queue below the high-water mark, is taken whole:
    /// its size says nothing about the peer. (A 31 MB HTTP response was cut off after its head
    /// because the drop limit was checked against every write.)
    @Test func oneWriteLargerThanTheDropLimitIsDeliveredWhole() async throws {
        let group = try EventLoopGroup(threads: 2)
        defer { group.shutdown() }
        let (server, client) = (group.loops[0], group.loops[1])
        let keep = Keeper()
        let total = 4 << 20
        let received = Atomic<Int>(0)
        let closedEarly = Atomic<Bool>(false)
        let port = try await startListener(on: server, keep: keep) { _, bytes in received.add(bytes.count, ordering: .relaxed) }
        let clientSide = Keeper()
        try await client.submit { () throws -> Void in
            let d = ClosureDelegate()
            d.onReady = { c in c.write([UInt8](repeating: 7, count: total)) }
            d.onClose = { _, error in if error != nil { closedEarly.store(true, ordering: .relaxed) } }
            var limits = WriteLimits()
            limits.highWaterMark = 64 << 10
            limits.dropLimit = 1 << 20
            let c = try TCPConnection.connect(to: try SocketAddress(ip: "127.0.0.1", port: port), loop: client, delegate: d)
            c.limits = limits
            clientSide.objects.append(c)
        }
        _ = await eventually { received.load(ordering: .relaxed) >= total || closedEarly.load(ordering: .relaxed) }
        let wasClosedEarly = closedEarly.load(ordering: .relaxed)
        #expect(!wasClosedEarly)
        #expect(received.load(ordering: .relaxed) == total)
        let peak = try await client.submit { () -> Int in (clientSide.objects.first as? TCPConnection)?.peakPendingOutputBytes ?? -1 }
        #expect(peak > 0 && peak <= total)
    }

    /// `totalBytesWritten` is exact even when `connectionDidDrain` queues more output (and
    /// flushes it, re-entering the flush that called it): the WebSocket layer derives its queue
    /// size from this counter, so a byte lost here would count as queued forever.
    @Test func totalBytesWritten_isExact_whenTheDrainCallbackWritesMore() async throws {
        let group = try EventLoopGroup(threads: 2)
        defer { group.shutdown() }
        let (server, client) = (group.loops[0], group.loops[1])
        let keep = Keeper()
        let rounds = 6
        let piece = 1 << 20
        let total = piece * (rounds + 1)
        let received = Atomic<Int>(0)
        let port = try await startListener(on: server, keep: keep) { _, bytes in received.add(bytes.count, ordering: .relaxed) }
        // Everything on the client loop; the test polls it, so nothing can wait forever.
        let clientSide = Keeper()
        let drains = Atomic<Int>(0)
        try await client.submit { () throws -> Void in
            let d = ClosureDelegate()
            d.onReady = { c in
                var small: Int32 = 64 << 10  // the kernel takes little per flush
                setsockopt(c.fd, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size))
                c.write([UInt8](repeating: 1, count: piece))
            }
            d.onDrain = { c in
                // Called from inside flushNow: this write flushes again, re-entering it.
                if drains.add(1, ordering: .relaxed).newValue <= rounds { c.write([UInt8](repeating: 2, count: piece)) }
            }
            var limits = WriteLimits()
            limits.highWaterMark = 64 << 10
            limits.lowWaterMark = 16 << 10
            let c = try TCPConnection.connect(to: try SocketAddress(ip: "127.0.0.1", port: port), loop: client, delegate: d)
            c.limits = limits
            clientSide.objects.append(c)
        }
        #expect(await eventually { received.load(ordering: .relaxed) >= total })
        #expect(received.load(ordering: .relaxed) == total)
        let (pending, written) = try await client.submit { () -> (Int, UInt64) in
            guard let c = clientSide.objects.first as? TCPConnection else { return (-1, 0) }
            return (c.pendingOutputBytes, c.totalBytesWritten)
        }
        #expect(drains.load(ordering: .relaxed) > rounds)
        #expect(pending == 0)
        #expect(written == UInt64(total))
    }

    /// Runs `EMFILEChild` in a child process whose descriptor limit is 64, so exhausting
    /// descriptors cannot disturb the other tests of this process.
    @Test func acceptPausesOnDescriptorExhaustionWithoutSpinning() async throws {
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        try #require(n > 0)
        let path = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var env = ProcessInfo.processInfo.environment
        env["BIGPEER_EMFILE_CHILD"] = "1"
        let r = try await TestCommand.run("/bin/sh", ["-c", "ulimit -n 64 && exec \"$0\" --testing-library swift-testing --filter EMFILEChild", path],
                                    environment: env)
        let text = r.out + r.err
        #expect(r.status == 0, "\(text.suffix(2000))")
        #expect(text.contains("exhaustion scenario passed"))
    }
}

/// The child half of `acceptPausesOnDescriptorExhaustionWithoutSpinning`: runs only in the child
/// it starts (with a 64-descriptor limit); in any other run it is reported as skipped.
@Suite struct EMFILEChild {
    @Test(.enabled(if: ProcessInfo.processInfo.environment["BIGPEER_EMFILE_CHILD"] == "1", "runs in the child process of acceptPausesOnDescriptorExhaustionWithoutSpinning"))
    func scenario() async throws {
        let loop = try EventLoop()
        defer { loop.stop() }
        let keep = Keeper()
        let accepted = Atomic<Int>(0)
        let port = try await loop.submit { () throws -> Int in
            var options = ListenOptions()
            options.descriptorExhaustionPause = .milliseconds(50)
            let l = try TCPListener(address: try SocketAddress(ip: "127.0.0.1", port: 0), options: options, loop: loop) { fd, _ in
                accepted.add(1, ordering: .relaxed)
                close(fd)
            }
            keep.objects.append(l)
            return l.localAddress.port
        }
        // Use every descriptor but one, then let a client take that one: the accept has none.
        var fillers: [Int32] = []
        while true {
            let fd = dup(0)
            if fd < 0 { break }
            fillers.append(fd)
        }
        try #require(errno == EMFILE && fillers.count > 4)
        close(fillers.removeLast())
        let start = ContinuousClock.now  // before the connect: no accept, so no pause, can come earlier
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(client >= 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        try #require(rc == 0)
        // The waits poll on a thread of their own: with no descriptors left, the runtime's timers
        // (Task.sleep) could not start, and a blocking sleep on this task would hold a cooperative
        // thread. Resuming this task from that thread needs no descriptor.
        // The listener's count is read on its loop (`execute` needs no new descriptor); each poll
        // sees the value the previous one asked for.
        let pauses = Atomic<Int>(0)
        let paused = await OwnThread.run {
            Self.poll(within: .seconds(20)) {
                loop.execute { pauses.store((keep.objects[0] as? TCPListener)?.exhaustionPauses ?? -1, ordering: .relaxed) }
                return pauses.load(ordering: .relaxed) >= 3
            }
        }
        let elapsed = ContinuousClock.now - start
        #expect(paused, "pauses: \(pauses.load(ordering: .relaxed))")
        #expect(accepted.load(ordering: .relaxed) == 0)
        // Paused and re-armed every 50 ms, not a busy loop: three attempts take at least two pauses
        // (a lower bound, which load cannot break).
        #expect(elapsed >= .milliseconds(100), "3 pauses in \(elapsed)")
        for fd in fillers.suffix(4) { close(fd) }
        #expect(await OwnThread.run { Self.poll(within: .seconds(20)) { accepted.load(ordering: .relaxed) == 1 } })
        close(client)
        print("exhaustion scenario passed")
    }

    /// `eventually` for a thread of its own (no timers: they need descriptors this test has used up).
    static func poll(within timeout: Duration, _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            usleep(5_000)
        }
        return true
    }
}
