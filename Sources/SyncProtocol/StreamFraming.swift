// Message framing for byte-stream links: TCP peer links (PROTOCOL.md §2); BLE L2CAP channels cut
// these frames into SDUs (`PacketFraming`, §2.1).
//
//   +----------------------+--------------------------+----------------------+---
//   | N: uint32 big-endian | N bytes: one CBOR message | M: uint32 big-endian | ...
//   +----------------------+--------------------------+----------------------+---
//
// The decoder accepts bytes in any chunking. Sans-I/O: feed bytes, get
// complete messages. The length is checked against the limit as soon as its 4 bytes are known,
// before anything is buffered for the body (never an allocation sized by the peer beyond `maxMessageSize`).

public enum StreamFraming {
    /// `message` prefixed with its 4-byte big-endian length.
    public static func frame(_ message: [UInt8]) -> [UInt8] {
        let n = UInt32(truncatingIfNeeded: message.count)
        var out: [UInt8] = [UInt8(truncatingIfNeeded: n >> 24), UInt8(truncatingIfNeeded: n >> 16),
                            UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)]
        out.reserveCapacity(4 + message.count)
        out.append(contentsOf: message)
        return out
    }

    /// `frame` cut into chunks of at most `mtu` bytes (what a BLE sender writes as SDUs).
    public static func chunks(_ framed: [UInt8], mtu: Int) -> [[UInt8]] {
        let size = max(1, mtu)
        return stride(from: 0, to: framed.count, by: size).map { Array(framed[$0..<min($0 + size, framed.count)]) }
    }
}

/// Reassembles length-prefixed messages from a byte stream.
public struct StreamFrameDecoder: Sendable {
    public enum FramingError: Error, Sendable, Equatable {
        /// A zero length (close 4004) or one above the limit (close 4009).
        case invalidLength(UInt32, limit: Int)

        public var closeCode: SyncCloseCode {
            if case .invalidLength(0, _) = self { return .protocolViolation }
            return .messageTooLarge
        }
    }

    public let maxMessageSize: Int
    /// Largest first message (a served link's `hello`), when smaller; nil: `maxMessageSize`.
    public let maxFirstMessageSize: Int?
    private var firstMessageTaken = false
    private var buffer: [UInt8] = []
    /// Offset of the first unconsumed byte in `buffer` (compacted as messages are taken).
    private var start = 0

    public init(maxMessageSize: Int, maxFirstMessageSize: Int? = nil) {
        self.maxMessageSize = maxMessageSize
        self.maxFirstMessageSize = maxFirstMessageSize
    }

    /// Bytes held for an incomplete frame (at most 4 + `maxMessageSize`).
    public var bufferedBytes: Int { buffer.count - start }

    /// Adds received bytes; returns every message now complete, in order.
    public mutating func feed(_ bytes: some Collection<UInt8>) throws(FramingError) -> [[UInt8]] {
        buffer.append(contentsOf: bytes)
        var messages: [[UInt8]] = []
        while buffer.count - start >= 4 {
            let n = UInt32(buffer[start]) << 24 | UInt32(buffer[start + 1]) << 16 | UInt32(buffer[start + 2]) << 8 | UInt32(buffer[start + 3])
            let limit = firstMessageTaken ? maxMessageSize : min(maxMessageSize, maxFirstMessageSize ?? maxMessageSize)
            guard n > 0, Int(n) <= limit else { throw .invalidLength(n, limit: limit) }
            guard buffer.count - start - 4 >= Int(n) else { break }
            messages.append(Array(buffer[(start + 4)..<(start + 4 + Int(n))]))
            firstMessageTaken = true
            start += 4 + Int(n)
        }
        if start > 0 && (start == buffer.count || start > 64 << 10) {
            buffer.removeFirst(start)
            start = 0
        }
        return messages
    }
}
