// What the socket layer and the state machines exchange: interfaces, addresses, packets in and
// packets out. Time is milliseconds on any monotonic clock, passed into every step as `now`.

/// The mDNS port (RFC 6762): queries from any other source port are legacy unicast queries (§6.7).
public let mdnsPort: UInt16 = 5353

/// A network interface, by the kernel's interface index.
public struct InterfaceID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var index: UInt32
    public init(_ index: UInt32) { self.index = index }
    public static func < (lhs: InterfaceID, rhs: InterfaceID) -> Bool { lhs.index < rhs.index }
    public var description: String { "if\(index)" }
}

public enum IPAddress: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The address as a big-endian number: 192.168.1.2 is 0xC0A8_0102.
    case v4(UInt32)
    case v6(high: UInt64, low: UInt64)

    /// 4 bytes make an IPv4 address, 16 an IPv6 one (network order).
    public init?(bytes: [UInt8]) {
        switch bytes.count {
        case 4: self = .v4(bytes.reduce(0) { $0 << 8 | UInt32($1) })
        case 16:
            self = .v6(high: bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }, low: bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) })
        default: return nil
        }
    }

    public var bytes: [UInt8] {
        switch self {
        case let .v4(value): (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }
        case let .v6(high, low):
            (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) } + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
        }
    }

    public var isIPv4: Bool { if case .v4 = self { true } else { false } }

    /// Dotted quad, or eight groups of hex (no `::` shortening).
    public var description: String {
        switch self {
        case .v4: bytes.map(String.init).joined(separator: ".")
        case .v6:
            stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }.joined(separator: ":")
        }
    }
}

/// An address and UDP port: where a packet came from, or where a unicast answer goes.
public struct Endpoint: Hashable, Sendable, CustomStringConvertible {
    public var address: IPAddress
    public var port: UInt16
    public init(address: IPAddress, port: UInt16) {
        self.address = address
        self.port = port
    }
    public var description: String { address.isIPv4 ? "\(address):\(port)" : "[\(address)]:\(port)" }
}

/// One datagram as the socket layer received it (IP_PKTINFO gives the interface and whether it
/// was sent to the multicast group).
public struct ReceivedPacket: Sendable {
    public var bytes: [UInt8]
    public var interface: InterfaceID
    public var source: Endpoint
    /// True when it was addressed to 224.0.0.251 / ff02::fb, false for a unicast datagram to us.
    public var viaMulticast: Bool

    public init(bytes: [UInt8], interface: InterfaceID, source: Endpoint, viaMulticast: Bool = true) {
        self.bytes = bytes
        self.interface = interface
        self.source = source
        self.viaMulticast = viaMulticast
    }
}

/// One datagram to send, from port 5353 with IP TTL / hop limit 255 (RFC 6762 §11).
public struct OutgoingPacket: Hashable, Sendable {
    public enum Destination: Hashable, Sendable {
        /// The mDNS group of every address family the interface has (224.0.0.251:5353 and
        /// [ff02::fb]:5353): an answer lists the interface's IPv4 and IPv6 addresses alike.
        case multicast
        case unicast(Endpoint)
    }

    public var bytes: [UInt8]
    public var interface: InterfaceID
    public var destination: Destination

    public init(bytes: [UInt8], interface: InterfaceID, destination: Destination) {
        self.bytes = bytes
        self.interface = interface
        self.destination = destination
    }
}

/// The uniform random source of the state machines' jitter; tests inject a seeded one.
public struct JitterSource: Sendable {
    var generator: any RandomNumberGenerator & Sendable

    public init(_ generator: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()) {
        self.generator = generator
    }

    /// A uniformly random number of milliseconds in `range`.
    mutating func millis(_ range: ClosedRange<Int64>) -> Int64 {
        let span = UInt64(range.upperBound - range.lowerBound) + 1
        return range.lowerBound + Int64(generator.next() % span)
    }
}
