import CEpoll
import Glibc

/// A network interface as `getifaddrs(3)` lists it, with its addresses (what mDNS advertises on
/// it, and where it joins the multicast group).
public struct NetworkInterface: Sendable, Equatable {
    public var name: String
    public var index: Int32
    public var isUp: Bool
    public var isLoopback: Bool
    public var supportsMulticast: Bool
    /// Numeric addresses, e.g. `10.0.0.5`, `fe80::1` (without a scope suffix).
    public var ipv4: [String]
    public var ipv6: [String]

    public init(name: String, index: Int32, isUp: Bool, isLoopback: Bool, supportsMulticast: Bool, ipv4: [String], ipv6: [String]) {
        self.name = name
        self.index = index
        self.isUp = isUp
        self.isLoopback = isLoopback
        self.supportsMulticast = supportsMulticast
        self.ipv4 = ipv4
        self.ipv6 = ipv6
    }

    /// Every interface of this network namespace now, by name. One `getifaddrs` call: cheap
    /// enough to poll every few seconds for address changes.
    public static func current() -> [NetworkInterface] {
        var head: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&head) == 0, let first = head else { return [] }
        defer { freeifaddrs(first) }
        var byName: [String: NetworkInterface] = [:]
        var order: [String] = []
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let cName = entry.pointee.ifa_name else { continue }
            let name = String(cString: cName)
            let flags = entry.pointee.ifa_flags
            if byName[name] == nil {
                order.append(name)
                byName[name] = NetworkInterface(name: name, index: Int32(bitPattern: if_nametoindex(cName)),
                                                isUp: flags & UInt32(IFF_UP) != 0 && flags & UInt32(IFF_RUNNING) != 0,
                                                isLoopback: flags & UInt32(IFF_LOOPBACK) != 0,
                                                supportsMulticast: flags & UInt32(IFF_MULTICAST) != 0, ipv4: [], ipv6: [])
            }
            guard let sa = entry.pointee.ifa_addr else { continue }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            switch Int32(sa.pointee.sa_family) {
            case AF_INET:
                var a = UnsafeRawPointer(sa).load(as: sockaddr_in.self).sin_addr
                if inet_ntop(AF_INET, &a, &text, socklen_t(text.count)) != nil { byName[name]?.ipv4.append(Self.string(text)) }
            case AF_INET6:
                var a = UnsafeRawPointer(sa).load(as: sockaddr_in6.self).sin6_addr
                if inet_ntop(AF_INET6, &a, &text, socklen_t(text.count)) != nil { byName[name]?.ipv6.append(Self.string(text)) }
            default:
                break
            }
        }
        return order.compactMap { byName[$0] }
    }

    private static func string(_ c: [CChar]) -> String {
        String(decoding: c.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
