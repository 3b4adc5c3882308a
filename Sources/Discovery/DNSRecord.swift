// The parts of a DNS message: header, questions and resource records, as values. The wire codec
// is in DNSMessageReader.swift and DNSMessageWriter.swift.

public struct DNSHeader: Hashable, Sendable {
    public var id: UInt16
    public var flags: UInt16

    public init(id: UInt16 = 0, flags: UInt16 = 0) {
        self.id = id
        self.flags = flags
    }

    static let responseBit: UInt16 = 0x8000
    static let authoritativeBit: UInt16 = 0x0400
    static let truncatedBit: UInt16 = 0x0200

    /// An mDNS response: QR and AA set, opcode 0 (RFC 6762 §18.2, §18.4).
    public static func response(id: UInt16 = 0) -> DNSHeader { DNSHeader(id: id, flags: responseBit | authoritativeBit) }
    public static func query(id: UInt16 = 0, truncated: Bool = false) -> DNSHeader {
        DNSHeader(id: id, flags: truncated ? truncatedBit : 0)
    }

    public var isResponse: Bool { flags & Self.responseBit != 0 }
    public var opcode: UInt8 { UInt8((flags >> 11) & 0xF) }
    public var isAuthoritative: Bool { flags & Self.authoritativeBit != 0 }
    /// In a query: more known answers follow in the next packet (RFC 6762 §7.2).
    public var isTruncated: Bool { flags & Self.truncatedBit != 0 }
    /// RCODE (RFC 6762 §18.11: mDNS ignores messages whose RCODE is not zero).
    public var responseCode: UInt8 { UInt8(flags & 0xF) }
}

public struct DNSQuestion: Hashable, Sendable {
    public var name: DNSName
    public var type: DNSRecordType
    /// The class without the QU bit.
    public var recordClass: UInt16
    /// QU: the querier asks for a unicast answer (RFC 6762 §5.4).
    public var unicastResponse: Bool

    public init(name: DNSName, type: DNSRecordType, recordClass: UInt16 = DNSClass.internet, unicastResponse: Bool = false) {
        self.name = name
        self.type = type
        self.recordClass = recordClass
        self.unicastResponse = unicastResponse
    }

    /// True when `record` answers this question (same name, type or ANY, class or ANY).
    public func isAnswered(by record: DNSResourceRecord) -> Bool {
        (type == .any || type == record.type)
            && (recordClass == DNSClass.any || recordClass == record.recordClass)
            && name == record.name
    }
}

/// Record data of the types mDNS/DNS-SD uses; anything else is kept as its bytes.
public enum DNSRecordData: Hashable, Sendable {
    case a(IPAddress)
    case aaaa(IPAddress)
    case ptr(DNSName)
    case srv(priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)
    /// The character-strings (each ≤ 255 bytes). No strings is written as one empty string: a TXT
    /// record is never empty (RFC 6763 §6.1); the decoder and `txt(_:)` give that form, `[[]]`.
    case txt([[UInt8]])
    /// The restricted mDNS form (RFC 6762 §6.1): the next name is the owner name, and the bitmap
    /// lists the types the owner has.
    case nsec(next: DNSName, types: [DNSRecordType])
    case opaque(type: DNSRecordType, bytes: [UInt8])

    /// TXT rdata of key/value pairs, in the form the decoder gives back (`[[]]` when empty).
    public static func txt(_ record: TXTRecord) -> DNSRecordData {
        .txt(record.strings.isEmpty ? [[]] : record.strings)
    }

    public var type: DNSRecordType {
        switch self {
        case .a: .a
        case .aaaa: .aaaa
        case .ptr: .ptr
        case .srv: .srv
        case .txt: .txt
        case .nsec: .nsec
        case let .opaque(type, _): type
        }
    }
}

public struct DNSResourceRecord: Hashable, Sendable {
    public var name: DNSName
    /// The class without the cache-flush bit.
    public var recordClass: UInt16
    /// Cache-flush (RFC 6762 §10.2): this is the whole set of records of this name and type.
    public var cacheFlush: Bool
    /// Seconds; 0 is a goodbye (§10.1).
    public var ttl: UInt32
    public var data: DNSRecordData

    public init(name: DNSName, data: DNSRecordData, ttl: UInt32, cacheFlush: Bool = false, recordClass: UInt16 = DNSClass.internet) {
        self.name = name
        self.data = data
        self.ttl = ttl
        self.cacheFlush = cacheFlush
        self.recordClass = recordClass
    }

    public var type: DNSRecordType { data.type }

    /// Same name, type, class and rdata: the same record whatever its TTL and cache-flush bit.
    public func isSameRecord(as other: DNSResourceRecord) -> Bool {
        recordClass == other.recordClass && data == other.data && name == other.name
    }

    /// The record with another TTL (0 for a goodbye).
    public func with(ttl: UInt32) -> DNSResourceRecord {
        var copy = self
        copy.ttl = ttl
        return copy
    }
}

public struct DNSMessage: Hashable, Sendable {
    public var header: DNSHeader
    public var questions: [DNSQuestion]
    public var answers: [DNSResourceRecord]
    public var authorities: [DNSResourceRecord]
    public var additionals: [DNSResourceRecord]

    public init(header: DNSHeader, questions: [DNSQuestion] = [], answers: [DNSResourceRecord] = [],
                authorities: [DNSResourceRecord] = [], additionals: [DNSResourceRecord] = []) {
        self.header = header
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    /// RFC 6762 §17: a multicast DNS message may be up to 9000 bytes (jumbo frames).
    public static let maxLength = 9000
}

extension DNSRecordData {
    /// The rdata bytes with no compression: what RFC 6762 §8.2's probe tie-break compares.
    var uncompressedBytes: [UInt8] {
        switch self {
        case let .a(address), let .aaaa(address): return address.bytes
        case let .ptr(name): return name.uncompressedWire
        case let .srv(priority, weight, port, target):
            return [priority, weight, port].flatMap { [UInt8($0 >> 8), UInt8($0 & 0xFF)] } + target.uncompressedWire
        case let .txt(strings):
            return strings.isEmpty ? [0] : strings.flatMap { [UInt8(truncatingIfNeeded: $0.count)] + $0 }
        case let .nsec(next, types): return next.uncompressedWire + DNSMessageWriter.typeBitmap(types)
        case let .opaque(_, bytes): return bytes
        }
    }
}
