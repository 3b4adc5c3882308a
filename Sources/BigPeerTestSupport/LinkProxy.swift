// A TCP relay on loopback that plays a bad network link between two processes (the idea of
// Shopify's toxiproxy): it forwards bytes both ways and can hold them (a cut link: both ends stay
// up, nothing arrives, no FIN or RST), delay them, throttle them, or reset every connection.
// Used where `tc netem` cannot be (this machine's kernel has no queueing disciplines at all).
//
// Threads: one accept thread, and two per relayed connection (one per direction), each blocking
// in `recv` with a 50 ms timeout so it notices a stop. Not the event loops: a test helper that
// must keep relaying while the test's own loops and the cooperative pool are busy.

import Foundation
import Glibc

public final class LinkProxy: Sendable {
    /// What the link does to bytes now.
    public struct Conditions: Sendable, Equatable {
        /// Hold every byte (each direction keeps what it has read until the link comes back).
        public var cut = false
        /// Extra latency per forwarded chunk.
        public var delay: Duration = .zero
        /// Throughput in bytes per second per direction (nil: unlimited).
        public var bytesPerSecond: Int?
        public init(cut: Bool = false, delay: Duration = .zero, bytesPerSecond: Int? = nil) {
            self.cut = cut
            self.delay = delay
            self.bytesPerSecond = bytesPerSecond
        }
    }

    public let port: Int
    private let targetPort: Int
    private let listener: Int32
    private let state = MutexBox<(conditions: Conditions, sockets: [Int32], stopped: Bool, forwarded: Int)>((Conditions(), [], false, 0))

    /// Listens on a free loopback port and relays every connection to `127.0.0.1:targetPort`.
    public init(to targetPort: Int) throws {
        self.targetPort = targetPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LinkProxyError.socket(errno) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw LinkProxyError.socket(errno)
        }
        var got = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &got) { p in p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        Self.setReceiveTimeout(fd)
        listener = fd
        port = Int(UInt16(bigEndian: got.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Changes what the link does from now on (bytes already held go out when a cut ends).
    public func set(_ conditions: Conditions) { state.withLock { $0.conditions = conditions } }

    /// Closes every relayed connection at once (both ends see the connection reset or closed).
    public func resetConnections() {
        let sockets = state.withLock { s -> [Int32] in defer { s.sockets = [] }; return s.sockets }
        for fd in sockets { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Bytes forwarded so far, both directions.
    public var forwardedBytes: Int { state.withLock { $0.forwarded } }

    /// Stops accepting and relaying.
    public func stop() {
        state.withLock { $0.stopped = true }
        resetConnections()
        shutdown(listener, Int32(SHUT_RDWR))
    }

    deinit { close(listener) }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        while !stopped {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { continue }
                return
            }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var addr = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
            }
            guard upstream >= 0, connected else {
                close(client)
                if upstream >= 0 { close(upstream) }
                continue
            }
            Self.setReceiveTimeout(client)
            Self.setReceiveTimeout(upstream)
            state.withLock { $0.sockets += [client, upstream] }
            let done = MutexBox(0)
            for (from, to) in [(client, upstream), (upstream, client)] {
                Thread.detachNewThread { [self] in
                    pump(from: from, to: to)
                    // The second direction to finish closes both descriptors.
                    if done.withLock({ $0 += 1; return $0 }) == 2 {
                        close(client)
                        close(upstream)
                    }
                }
            }
        }
    }

    private func pump(from: Int32, to: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while !stopped {
            let n = recv(from, &buffer, buffer.count, 0)
            if n == 0 { break }
            if n < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR { continue }
                break
            }
            var conditions = state.withLock { $0.conditions }
            while conditions.cut && !stopped {
                usleep(10_000)
                conditions = state.withLock { $0.conditions }
            }
            if conditions.delay > .zero { Thread.sleep(forTimeInterval: Double(conditions.delay.components.attoseconds) / 1e18 + Double(conditions.delay.components.seconds)) }
            if let rate = conditions.bytesPerSecond, rate > 0 { Thread.sleep(forTimeInterval: Double(n) / Double(rate)) }
            var sent = 0
            while sent < n {
                let m = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                if m <= 0 {
                    if m < 0 && errno == EINTR { continue }
                    shutdown(from, Int32(SHUT_RDWR))
                    return
                }
                sent += m
            }
            state.withLock { $0.forwarded += n }
        }
        shutdown(to, Int32(SHUT_WR))
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return addr
    }

    private static func setReceiveTimeout(_ fd: Int32) {
        var tv = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
}

public enum LinkProxyError: Error {
    case socket(Int32)
}
