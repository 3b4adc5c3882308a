// Why a DNS message was refused: every decoder and encoder failure in this module is one of these,
// with the byte offset where the message stopped making sense.

public enum DNSError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The message is longer than the mDNS maximum (RFC 6762 §17: 9000 bytes).
    case messageTooLong(length: Int, limit: Int)
    /// A read would pass the end of the message (or of a record's rdata).
    case truncated(offset: Int, needed: Int)
    /// The header's record counts need more bytes than the message holds.
    case countsExceedMessage(questions: Int, records: Int, length: Int)
    /// A label longer than 63 bytes, or a label length byte with the reserved top bits 01 or 10.
    case badLabel(offset: Int, length: Int)
    /// An empty label inside a name given as text or labels (only the root may be empty).
    case emptyLabel
    /// A name longer than 255 bytes in wire form (RFC 1035 §3.1).
    case nameTooLong(length: Int)
    /// A compression pointer that does not point strictly before every byte of the name read so
    /// far: forward pointers and loops.
    case badPointer(offset: Int, target: Int)
    /// An rdata whose length does not fit its type (A is 4 bytes, AAAA 16, SRV 6 + name, …).
    case badRecordData(type: UInt16, offset: Int)
    /// A TXT string longer than 255 bytes cannot be encoded.
    case txtStringTooLong(length: Int)
    /// An NSEC type bitmap that is empty, too long, or out of order (RFC 4034 §4.1.2).
    case badTypeBitmap(offset: Int)
    /// Bytes left over after the last record the header announced.
    case trailingBytes(offset: Int)

    public var description: String {
        switch self {
        case let .messageTooLong(length, limit): "DNS message of \(length) bytes exceeds \(limit)"
        case let .truncated(offset, needed): "DNS message truncated at offset \(offset) (needed \(needed) more bytes)"
        case let .countsExceedMessage(questions, records, length):
            "DNS header announces \(questions) questions and \(records) records, more than \(length) bytes can hold"
        case let .badLabel(offset, length): "bad DNS label at offset \(offset) (length byte \(length))"
        case .emptyLabel: "empty label inside a DNS name"
        case let .nameTooLong(length): "DNS name of \(length) bytes exceeds 255"
        case let .badPointer(offset, target): "DNS compression pointer at offset \(offset) to \(target) does not point backwards"
        case let .badRecordData(type, offset): "bad rdata for type \(type) at offset \(offset)"
        case let .txtStringTooLong(length): "TXT string of \(length) bytes exceeds 255"
        case let .badTypeBitmap(offset): "bad NSEC type bitmap at offset \(offset)"
        case let .trailingBytes(offset): "trailing bytes after the last DNS record at offset \(offset)"
        }
    }
}
