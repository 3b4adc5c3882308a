import Discovery

/// How BigPeer nodes and peers appear on the LAN (docs/LOCAL-NODE.md, "Discovery"):
/// `NAME._bigpeer._tcp.local.`, SRV → the LAN peer-link port, TXT `v` (protocol version), `pk`
/// (peer key, hex), `g` (sync group), `role` (`node` or `peer`).
public struct LANAdvertisement: Sendable, Equatable {
    public static let serviceType = "_bigpeer._tcp.local"

    public enum Role: String, Sendable { case node, peer }

    public var name: String
    public var port: UInt16
    public var protocolVersion: UInt64
    public var peerKey: [UInt8]
    public var syncGroup: UInt32
    public var role: Role

    public init(name: String, port: UInt16, protocolVersion: UInt64, peerKey: [UInt8], syncGroup: UInt32, role: Role) {
        self.name = name
        self.port = port
        self.protocolVersion = protocolVersion
        self.peerKey = peerKey
        self.syncGroup = syncGroup
        self.role = role
    }

    public var service: MDNSService {
        get throws {
            let txt = try TXTRecord([("v", String(protocolVersion)), ("pk", Self.hex(peerKey)), ("g", String(syncGroup)), ("role", role.rawValue)])
            return MDNSService(instanceName: name, serviceType: try DNSName(Self.serviceType), port: port, txt: txt)
        }
    }

    /// What a browser found, if it is a BigPeer advertisement (every TXT key present and valid).
    public init?(_ found: DiscoveredService) {
        guard let v = found.txt["v"].flatMap(UInt64.init), let pk = found.txt["pk"].flatMap(Self.unhex),
              let g = found.txt["g"].flatMap(UInt32.init), let role = found.txt["role"].flatMap(Role.init(rawValue:)) else { return nil }
        self.init(name: found.instanceName, port: found.port, protocolVersion: v, peerKey: pk, syncGroup: g, role: role)
    }

    /// The key a replica advertises (TXT `pk`): its CRDT site id, 8 bytes big-endian.
    public static func siteKey(_ site: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: site >> (56 - 8 * $0)) }
    }

    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }

    static func unhex(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0, chars.count <= 512 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        for i in stride(from: 0, to: chars.count, by: 2) {
            guard let hi = Self.nibble(chars[i]), let lo = Self.nibble(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
