// Message framing for packet links: BLE L2CAP connection-oriented channels, whose SDUs keep their
// boundaries (PROTOCOL.md §2.1). A message starts at the beginning of an SDU:
//
//   first SDU:   N: uint32 big-endian | up to MTU-4 bytes of the message
//   next SDUs:   up to MTU bytes of the message, until N bytes have come
//   keepalive:   an SDU of exactly 4 zero bytes (N = 0), between messages only
//
// Sans-I/O: `PacketFraming` cuts messages into SDUs, `PacketAssembler` puts them back together
// with strict bounds (the length before anything is buffered, the SDU count, no SDU that runs
// past its message's end).

public enum PacketFraming {
    /// The smallest LE L2CAP MTU (Core spec, Vol 3 Part A §4.22): no link has a smaller one, so
    /// every SDU of a message but its last carries at least this many bytes.
    public static let minimumMTU = 23

    /// The keepalive SDU: a length of zero.
    public static let keepalive: [UInt8] = [0, 0, 0, 0]

    /// `message` as SDUs of at most `mtu` bytes (`mtu` at least `minimumMTU`).
    public static func sdus(_ message: [UInt8], mtu: Int) -> [[UInt8]] {
        StreamFraming.chunks(StreamFraming.frame(message), mtu: max(mtu, minimumMTU))
    }

    /// The most SDUs a message of `length` bytes may take: the count at the smallest MTU.
    public static func maximumSDUs(forLength length: Int) -> Int { (4 + length + minimumMTU - 1) / minimumMTU }
}

/// Reassembles messages from SDUs, one SDU at a time.
public struct PacketAssembler: Sendable {
    public enum Output: Sendable, Equatable {
        /// A message is complete.
        case message([UInt8])
        /// A keepalive (nothing for the session).
        case keepalive
        /// The SDU continued a message that is not complete yet.
        case partial
    }

    public enum FramingError: Error, Sendable, Equatable, CustomStringConvertible {
        /// A first SDU shorter than its 4-byte length.
        case shortFirstSDU(Int)
        /// A length above the limit.
        case tooLarge(UInt32, limit: Int)
        /// An SDU carrying bytes past the end of its message (two messages in one SDU).
        case overrun(extra: Int)
        /// More SDUs than the message's length allows at the smallest MTU.
        case tooManySDUs(Int, length: Int)
        /// An empty SDU.
        case emptySDU

        /// 4009 for a message above the limit, 4004 (protocol violation) for the rest.
        public var closeCode: SyncCloseCode {
            if case .tooLarge = self { return .messageTooLarge }
            return .protocolViolation
        }

        public var description: String {
            switch self {
            case .shortFirstSDU(let n): "first SDU of a message has \(n) bytes, fewer than its 4-byte length"
            case .tooLarge(let n, let limit): "message length \(n) above the limit \(limit)"
            case .overrun(let extra): "SDU runs \(extra) bytes past the end of its message"
            case .tooManySDUs(let n, let length): "\(n) SDUs for a \(length)-byte message"
            case .emptySDU: "empty SDU"
            }
        }
    }

    public let maxMessageSize: Int
    private var message: [UInt8] = []
    /// The length of the message being assembled; nil between messages.
    private var expected: Int?
    private var sdus = 0

    public init(maxMessageSize: Int) { self.maxMessageSize = maxMessageSize }

    /// Bytes held for an incomplete message.
    public var bufferedBytes: Int { message.count }

    /// Takes one SDU. After a throw the link must close (with the error's `closeCode`).
    public mutating func feed(_ sdu: some Collection<UInt8>) throws(FramingError) -> Output {
        guard !sdu.isEmpty else { throw .emptySDU }
        var body = sdu[...]
        if expected == nil {
            guard sdu.count >= 4 else { throw .shortFirstSDU(sdu.count) }
            var n: UInt32 = 0
            for b in sdu.prefix(4) { n = n << 8 | UInt32(b) }
            body = sdu.dropFirst(4)
            if n == 0 {
                guard body.isEmpty else { throw .overrun(extra: body.count) }
                return .keepalive
            }
            guard Int(n) <= maxMessageSize else { throw .tooLarge(n, limit: maxMessageSize) }
            expected = Int(n)
            sdus = 0
            message.reserveCapacity(Int(n))
        }
        guard let length = expected else { return .partial }
        sdus += 1
        guard sdus <= PacketFraming.maximumSDUs(forLength: length) else { throw .tooManySDUs(sdus, length: length) }
        let room = length - message.count
        guard body.count <= room else { throw .overrun(extra: body.count - room) }
        message.append(contentsOf: body)
        guard message.count == length else { return .partial }
        expected = nil
        defer { message = [] }
        return .message(message)
    }
}
