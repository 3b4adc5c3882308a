import CEpoll
import Glibc

/// A non-blocking UDP socket for link-local multicast (mDNS, RFC 6762 §11), registered on one loop:
/// bound to the port on every address with `SO_REUSEADDR` and `SO_REUSEPORT` (so an avahi or
/// another responder on the host keeps working), joined to the group per interface, hop limit
/// 255 on every datagram it sends, and told by `IP_PKTINFO` / `IPV6_PKTINFO` on which interface
/// each datagram arrived and to which address (the group, or this host: a unicast query). Sends
/// name their interface, so an answer leaves by the interface the question came in on.
///
/// Loss is normal for multicast: a send the kernel cannot take now (`EAGAIN`) is dropped and
/// counted, not queued. **Threading:** created, used and closed on `loop` only.
public final class UDPMulticastSocket {
    public struct Datagram: Sendable {
        public var bytes: [UInt8]
        public var source: SocketAddress
        /// The interface it arrived on (0 if the kernel did not say).
        public var interfaceIndex: Int32
        /// Sent to the multicast group (rather than to this host's address).
        public var toGroup: Bool
    }

    public let loop: EventLoop
    public let family: Int32
    public let fd: Int32
    public let localPort: Int
    private var registration: Registration?
    private let onDatagram: (Datagram) -> Void
    private var buffer = [UInt8](repeating: 0, count: 9000 + 1)
    /// Sends dropped (the socket buffer was full, or the interface is gone), and datagrams dropped
    /// on receipt because they were larger than 9000 bytes (RFC 6762 §17).
    public private(set) var droppedSends = 0
    public private(set) var droppedReceives = 0

    /// `family`: `AF_INET` or `AF_INET6` (IPv6 only: `IPV6_V6ONLY`). `port` 5353 for mDNS.
    public init(family: Int32, port: Int, loop: EventLoop, onDatagram: @escaping (Datagram) -> Void) throws(IOError) {
        loop.assertInLoop()
        self.loop = loop
        self.family = family
        self.onDatagram = onDatagram
        let fd = try Syscall.call("socket(UDP)") {
            socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do {
            try SocketOps.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
            try SocketOps.setOption(fd, SOL_SOCKET, SO_REUSEPORT, 1)
            _ = try Syscall.call("setsockopt(PKTINFO)") { bp_udp_enable_pktinfo(fd, family) }
            let any: SocketAddress
            if family == AF_INET6 {
                try SocketOps.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1)
                try SocketOps.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, 255)
                try SocketOps.setOption(fd, Int32(IPPROTO_IPV6), IPV6_UNICAST_HOPS, 255)
                try SocketOps.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, 1)
                any = try SocketAddress(ip: "::", port: port)
            } else {
                try SocketOps.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, 255)
                try SocketOps.setOption(fd, Int32(IPPROTO_IP), IP_TTL, 255)
                try SocketOps.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, 1)
                any = try SocketAddress(ip: "0.0.0.0", port: port)
            }
            _ = try Syscall.call("bind(\(any))") { any.withSockaddr { bind(fd, $0, $1) } }
            localPort = try SocketAddress.local(of: fd).port
        } catch {
            Syscall.close(fd)
            throw error
        }
        self.fd = fd
        registration = try loop.register(fd: fd, interest: .readable) { [weak self] _ in self?.readAll() }
    }

    /// Joins `group` (`224.0.0.251`, `ff02::fb`) on the interface. Joining twice is harmless.
    public func join(group: String, interfaceIndex: Int32) throws(IOError) {
        try membership(group: group, interfaceIndex: interfaceIndex, join: true)
    }

    /// Leaves `group` on the interface (an interface that went away has left already).
    public func leave(group: String, interfaceIndex: Int32) {
        try? membership(group: group, interfaceIndex: interfaceIndex, join: false)
    }

    private func membership(group: String, interfaceIndex: Int32, join: Bool) throws(IOError) {
        let address = try SocketAddress(ip: group, port: 0)
        if family == AF_INET6 {
            var request = ipv6_mreq()
            request.ipv6mr_multiaddr = withUnsafeBytes(of: address.storage) { $0.load(as: sockaddr_in6.self).sin6_addr }
            request.ipv6mr_interface = UInt32(bitPattern: interfaceIndex)
            let name = join ? IPV6_ADD_MEMBERSHIP : IPV6_DROP_MEMBERSHIP
            _ = try Syscall.call("setsockopt(IPV6 membership \(group))") {
                setsockopt(fd, Int32(IPPROTO_IPV6), name, &request, socklen_t(MemoryLayout<ipv6_mreq>.size))
            }
        } else {
            var request = ip_mreqn()
            request.imr_multiaddr = withUnsafeBytes(of: address.storage) { $0.load(as: sockaddr_in.self).sin_addr }
            request.imr_ifindex = interfaceIndex
            let name = join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP
            _ = try Syscall.call("setsockopt(IP membership \(group))") {
                setsockopt(fd, Int32(IPPROTO_IP), name, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
            }
        }
    }

    /// Sends one datagram out of interface `interfaceIndex`, from `source` (an address of that
    /// interface) when given. False if it was dropped.
    @discardableResult
    public func send(_ bytes: [UInt8], to destination: SocketAddress, interfaceIndex: Int32, source: SocketAddress? = nil) -> Bool {
        var from = source?.storage ?? sockaddr_storage()
        let hasSource = source != nil
        let sent = bytes.withUnsafeBytes { raw in
            destination.withSockaddr { to, length in
                withUnsafePointer(to: &from) { src in
                    bp_udp_send(fd, raw.baseAddress, UInt(raw.count), to, length, interfaceIndex, hasSource ? src : nil)
                }
            }
        }
        if sent != bytes.count { droppedSends += 1 }
        return sent == bytes.count
    }

    private func readAll() {
        // At most a bounded number per wake-up, so a flood cannot hold the loop.
        for _ in 0..<64 {
            var from = sockaddr_storage(), destination = sockaddr_storage()
            var fromLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
            var interfaceIndex: Int32 = 0
            let n = buffer.withUnsafeMutableBytes { raw in
                bp_udp_recv(fd, raw.baseAddress, UInt(raw.count), &from, &fromLength, &interfaceIndex, &destination)
            }
            if n == -2 { droppedReceives += 1; continue }
            guard n >= 0 else { return }  // EAGAIN: drained
            guard n <= 9000 else { droppedReceives += 1; continue }
            onDatagram(Datagram(bytes: Array(buffer[0..<n]), source: SocketAddress(storage: from, length: fromLength),
                                interfaceIndex: interfaceIndex, toGroup: Self.isMulticast(destination)))
        }
    }

    static func isMulticast(_ address: sockaddr_storage) -> Bool {
        withUnsafeBytes(of: address) { raw in
            if Int32(address.ss_family) == AF_INET6 { return raw.load(as: sockaddr_in6.self).sin6_addr.__in6_u.__u6_addr8.0 == 0xFF }
            let a = UInt32(bigEndian: raw.load(as: sockaddr_in.self).sin_addr.s_addr)
            return a >> 28 == 0xE
        }
    }

    public func close() {
        guard let registration else { return }
        loop.deregister(registration)
        self.registration = nil
        Syscall.close(fd)
    }
}
