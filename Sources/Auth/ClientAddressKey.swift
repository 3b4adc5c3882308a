import Glibc

/// The part of a client's IP address that rate limits and failed-authentication counts go by: the
/// whole address for IPv4 (also when it arrives IPv4-mapped on an IPv6 socket, `::ffff:a.b.c.d`),
/// the /64 prefix for IPv6. One IPv6 subscriber usually holds a whole /64 (RFC 6177, RFC 7934), so
/// counting by /128 would give an attacker 2^64 fresh buckets.
///
/// Held as the 128-bit IPv6 form: an IPv4 address as its mapped form (`high` 0, `low`
/// `0x0000_FFFF_xxxx_xxxx`), an IPv6 prefix with `low` 0. A native IPv6 address in `::/64`
/// keeps `low` 0 too, so the two never share a key.
public struct ClientAddressKey: Hashable, Sendable, CustomStringConvertible {
    let high: UInt64
    let low: UInt64

    public init(ipv4: UInt32) {
        self.init(high: 0, low: 0x0000_FFFF_0000_0000 | UInt64(ipv4))
    }

    private init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// From the 16 bytes of an IPv6 address in network order (an IPv4-mapped one counts as IPv4).
    public init?(ipv6 bytes: some Collection<UInt8>) {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0, low: UInt64 = 0
        for (i, b) in bytes.enumerated() {
            if i < 8 { high = high << 8 | UInt64(b) } else { low = low << 8 | UInt64(b) }
        }
        if high == 0 && low >> 32 == 0xFFFF {
            self.init(ipv4: UInt32(truncatingIfNeeded: low))
        } else {
            self.init(high: high, low: 0)
        }
    }

    /// From a peer's address as the server's sockets describe it: `a.b.c.d:port`, `[v6]:port`, or
    /// either without the port. Nil for anything else (a Bluetooth peer, `-`).
    public init?(remote: String) {
        var u = Substring(remote).utf8[...]
        if u.first == UInt8(ascii: "[") {
            guard let close = u.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            let inside = Substring(u[u.index(after: u.startIndex)..<close])
            // Drop a zone (`fe80::1%eth0`): it names the interface, not the client.
            let literal = String(inside.prefix { $0 != "%" })
            var a = in6_addr()
            guard inet_pton(AF_INET6, literal, &a) == 1 else { return nil }
            let bytes = withUnsafeBytes(of: a) { Array($0) }
            self.init(ipv6: bytes)
            return
        }
        if let colon = u.firstIndex(of: UInt8(ascii: ":")) { u = u[..<colon] }
        guard let v4 = Self.parseIPv4(u) else { return nil }
        self.init(ipv4: v4)
    }

    /// Dotted-quad IPv4, four decimal octets, no allocation.
    static func parseIPv4(_ u: Substring.UTF8View.SubSequence) -> UInt32? {
        var value: UInt32 = 0, octet: UInt32 = 0, digits = 0, dots = 0
        for b in u {
            if b == UInt8(ascii: ".") {
                guard digits > 0, dots < 3 else { return nil }
                value = value << 8 | octet
                octet = 0; digits = 0; dots += 1
            } else if b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") {
                octet = octet * 10 + UInt32(b - UInt8(ascii: "0"))
                digits += 1
                guard digits <= 3, octet <= 255 else { return nil }
            } else {
                return nil
            }
        }
        guard digits > 0, dots == 3 else { return nil }
        return value << 8 | octet
    }

    public var isIPv4: Bool { high == 0 && low >> 32 == 0xFFFF }

    /// `a.b.c.d`, or the IPv6 prefix as `xxxx:xxxx:xxxx:xxxx::/64` (for logs).
    public var description: String {
        if isIPv4 {
            return (0..<4).map { String((low >> (24 - 8 * $0)) & 0xFF) }.joined(separator: ".")
        }
        return (0..<4).map { String((high >> (48 - 16 * $0)) & 0xFFFF, radix: 16) }.joined(separator: ":") + "::/64"
    }
}
