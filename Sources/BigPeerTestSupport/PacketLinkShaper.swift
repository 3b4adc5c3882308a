// A relay between two AF_UNIX SEQPACKET sockets that plays a BLE L2CAP channel (the stand-in of
// tests): packets keep their boundaries and leave at `bytesPerSecond` (22 kB/s: BLE CoC in
// practice) after `latency`, with at most `inFlightBytes` held per direction (the channel's
// credits: a sender that outruns the link waits, as on L2CAP). With `lossPercentPerPacket`, a
// seeded draw per packet loses the link: from then on that connection forwards nothing either way
// and neither end is told (BLE loss is silence; the ends' supervision must notice).
//
// Threads: one accept thread and one per direction of each relayed connection (polling with a
// 50 ms timeout so they notice a stop). Not the event loops: the relay must keep time while the
// test's loops are busy.

import Foundation
import Glibc
import TestRandomness

public final class PacketLinkShaper: Sendable {
    public struct Conditions: Sendable {
        public var bytesPerSecond = 22_000
        public var latency: Duration = .milliseconds(100)
        public var inFlightBytes = 4096
        /// Chance (percent, per forwarded packet) that the link is lost.
        public var lossPercentPerPacket = 0.0
        /// No more losses after this many.
        public var maxLosses = Int.max
        public var seed: UInt64 = 0xB1E
        public init(bytesPerSecond: Int = 22_000, latency: Duration = .milliseconds(100), lossPercentPerPacket: Double = 0, maxLosses: Int = .max,
                    seed: UInt64 = 0xB1E) {
            self.bytesPerSecond = bytesPerSecond
            self.latency = latency
            self.lossPercentPerPacket = lossPercentPerPacket
            self.maxLosses = maxLosses
            self.seed = seed
        }
    }

    /// Where clients connect (`seqpacket://` + this).
    public let path: String
    private let targetPath: String
    private let listener: Int32
    private let state: MutexBox<(conditions: Conditions, random: SeededRandom, stopped: Bool, forwarded: Int, losses: Int, lost: Set<Int>)>

    /// Listens on `path` and relays every connection to the SEQPACKET listener at `targetPath`.
    public init(path: String, to targetPath: String, conditions: Conditions = Conditions()) throws {
        self.path = path
        self.targetPath = targetPath
        state = MutexBox((conditions, SeededRandom(seed: conditions.seed), false, 0, 0, []))
        unlink(path)
        let fd = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LinkProxyError.socket(errno) }
        guard Self.withAddress(path, { bind(fd, $0, $1) }) == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw LinkProxyError.socket(errno)
        }
        listener = fd
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    public func set(_ conditions: Conditions) { state.withLock { $0.conditions = conditions } }
    /// Bytes forwarded so far, both directions.
    public var forwardedBytes: Int { state.withLock { $0.forwarded } }
    /// Links lost so far.
    public var losses: Int { state.withLock { $0.losses } }

    public func stop() {
        state.withLock { $0.stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    deinit {
        close(listener)
        unlink(path)
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        var number = 0
        while !stopped {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let server = socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard server >= 0, Self.withAddress(targetPath, { connect(server, $0, $1) }) == 0 else {
                close(client)
                if server >= 0 { close(server) }
                continue
            }
            number += 1
            let link = number
            let done = MutexBox(0)
            for (from, to) in [(client, server), (server, client)] {
                Thread.detachNewThread { [self] in
                    pump(link: link, from: from, to: to)
                    if done.withLock({ $0 += 1; return $0 }) == 2 {
                        close(client)
                        close(server)
                    }
                }
            }
        }
    }

    /// One direction: read packets while fewer than `inFlightBytes` are held, deliver each when
    /// its time comes (latency after arrival, and no sooner than the rate allows after the last).
    private func pump(link: Int, from: Int32, to: Int32) {
        var held: [(due: ContinuousClock.Instant, packet: [UInt8])] = []
        var heldBytes = 0
        var nextFree = ContinuousClock.now
        var buffer = [UInt8](repeating: 0, count: 65536)
        var sourceOpen = true
        while !stopped {
            let (conditions, isLost) = state.withLock { ($0.conditions, $0.lost.contains(link)) }
            if isLost {
                // Silence: hold the sockets open until our source end closes them.
                var p = pollfd(fd: from, events: 0, revents: 0)
                if poll(&p, 1, 50) > 0 && p.revents & Int16(POLLHUP | POLLERR) != 0 { return }
                continue
            }
            let now = ContinuousClock.now
            while let first = held.first, first.due <= now {
                held.removeFirst()
                heldBytes -= first.packet.count
                _ = first.packet.withUnsafeBytes { send(to, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                state.withLock { $0.forwarded += first.packet.count }
            }
            if !sourceOpen && held.isEmpty {
                shutdown(to, Int32(SHUT_WR))
                return
            }
            let wait = held.first.map { Self.milliseconds($0.due - now) + 1 } ?? 50
            var p = pollfd(fd: from, events: sourceOpen && heldBytes < conditions.inFlightBytes ? Int16(POLLIN) : 0, revents: 0)
            guard poll(&p, 1, Int32(min(wait, 50))) > 0, p.revents & Int16(POLLIN | POLLHUP) != 0 else { continue }
            let n = recv(from, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if n == 0 { sourceOpen = false; continue }
            if n < 0 { if errno == EAGAIN || errno == EINTR { continue } else { sourceOpen = false; continue } }
            let lose = state.withLock { s -> Bool in
                guard s.conditions.lossPercentPerPacket > 0, s.losses < s.conditions.maxLosses,
                      Double(s.random.below(1_000_000)) < s.conditions.lossPercentPerPacket * 10_000 else { return false }
                s.lost.insert(link)
                s.losses += 1
                return true
            }
            if lose { continue }
            let arrival = ContinuousClock.now
            let transmit = Duration.nanoseconds(Int64(n) * 1_000_000_000 / Int64(max(1, conditions.bytesPerSecond)))
            nextFree = max(nextFree, arrival) + transmit
            held.append((max(arrival + conditions.latency, nextFree), Array(buffer[0..<n])))
            heldBytes += n
        }
    }

    private static func milliseconds(_ d: Duration) -> Int {
        max(0, Int(d.components.seconds) * 1000 + Int(d.components.attoseconds / 1_000_000_000_000_000))
    }

    private static func withAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var sun = sockaddr_un()
        sun.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &sun.sun_path) { $0.copyBytes(from: Array(path.utf8.prefix(107))) }
        return withUnsafePointer(to: &sun) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}
