// Record types and classes as numbers, with names for the ones mDNS/DNS-SD uses.

public struct DNSRecordType: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let a = DNSRecordType(rawValue: 1)
    public static let ptr = DNSRecordType(rawValue: 12)
    public static let txt = DNSRecordType(rawValue: 16)
    public static let aaaa = DNSRecordType(rawValue: 28)
    public static let srv = DNSRecordType(rawValue: 33)
    public static let nsec = DNSRecordType(rawValue: 47)
    /// Only in questions: every type the name has (RFC 1035 §3.2.3, "*").
    public static let any = DNSRecordType(rawValue: 255)

    public static func < (lhs: DNSRecordType, rhs: DNSRecordType) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .a: "A"
        case .ptr: "PTR"
        case .txt: "TXT"
        case .aaaa: "AAAA"
        case .srv: "SRV"
        case .nsec: "NSEC"
        case .any: "ANY"
        default: "TYPE\(rawValue)"
        }
    }
}

/// The class field without its top bit (which mDNS uses for QU in questions, cache-flush in records).
public enum DNSClass {
    public static let internet: UInt16 = 1
    public static let any: UInt16 = 255
    /// The top bit: QU in a question (RFC 6762 §5.4), cache-flush in a record (§10.2).
    static let topBit: UInt16 = 0x8000
}
