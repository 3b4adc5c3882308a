// The frame parser: a value-type state machine that turns bytes into frame events.
//
// It never buffers a payload. Once the header is complete it checks everything the header
// decides (reserved bits and opcodes §5.2, masking direction §5.1, control-frame rules §5.5,
// the 64-bit length's top bit §5.2, the frame size limit §10.4) and only then streams the
// payload out, unmasked, in whatever pieces the transport delivered. Its own buffer therefore
// never holds more than one partial header (≤ 14 bytes) plus the bytes of the latest `append`.
// Message-level rules (fragment order, UTF-8, limits across frames) belong to the connection.
//
//   append(bytes) ──► next() ─► .header(h) ─► .payload(chunk)* ─► .end ─► .header(…) …
//                          └──► nil: needs more bytes          └─► throws: fail with closeCode

/// One step of parsing.
public enum WebSocketFrameEvent: Hashable, Sendable {
    /// A frame header, validated.
    case header(WebSocketFrameHeader)
    /// The next piece of the current frame's payload, already unmasked; never empty.
    case payload([UInt8])
    /// The current frame's payload is complete.
    case end
}

/// Incremental frame parser (RFC 6455 §5.2).
public struct WebSocketFrameParser: Sendable {
    /// Whose frames this parser reads: a server reads masked client frames and vice versa.
    public let peer: WebSocketRole
    /// The largest payload accepted in one frame; larger ones fail with 1009 before any payload is read.
    public var maxFrameSize: Int
    /// Reserved bits a negotiated extension defines (only RSV1, for permessage-deflate, RFC 7692 §6).
    public var allowRSV1: Bool

    private enum State: Sendable {
        case header
        case payload(key: WebSocketMaskKey?, remaining: UInt64, offset: Int)
        case endOfFrame
        case failed(WebSocketProtocolError)
    }

    private var state: State = .header
    private var buffer: [UInt8] = []
    private var readIndex = 0

    public init(peer: WebSocketRole, maxFrameSize: Int, allowRSV1: Bool = false) {
        self.peer = peer
        self.maxFrameSize = maxFrameSize
        self.allowRSV1 = allowRSV1
    }

    /// Bytes received but not yet returned by `next()`.
    public var bufferedByteCount: Int { buffer.count - readIndex }

    /// Adds received bytes. Call `next()` until it returns nil before appending again to keep
    /// the internal buffer to one read's worth.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        buffer.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }

    private mutating func compact() {
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 16)
            readIndex = 0
        } else if readIndex > 0 {
            buffer.removeSubrange(0..<readIndex)
            readIndex = 0
        }
    }

    /// The next event, or nil when more bytes are needed. After an error every call rethrows it.
    public mutating func next() throws(WebSocketProtocolError) -> WebSocketFrameEvent? {
        switch state {
        case .failed(let error):
            throw error
        case .endOfFrame:
            state = .header
            return .end
        case .header:
            do {
                guard let header = try parseHeader() else { return nil }
                state = header.payloadLength == 0
                    ? .endOfFrame
                    : .payload(key: header.maskKey, remaining: header.payloadLength, offset: 0)
                return .header(header)
            } catch {
                state = .failed(error)
                throw error
            }
        case .payload(let key, let remaining, let offset):
            let available = buffer.count - readIndex
            guard available > 0 else { return nil }
            let n = Int(min(UInt64(available), remaining))
            var chunk = Array(buffer[readIndex..<(readIndex + n)])
            readIndex += n
            if let key { chunk.withUnsafeMutableBytes { applyMask(key, offset: offset, to: $0) } }
            let left = remaining - UInt64(n)
            state = left == 0 ? .endOfFrame : .payload(key: key, remaining: left, offset: (offset + n) & 3)
            return .payload(chunk)
        }
    }

    /// Reads a header if all of it is buffered; validates each field as soon as it is visible.
    private mutating func parseHeader() throws(WebSocketProtocolError) -> WebSocketFrameHeader? {
        let available = buffer.count - readIndex
        guard available >= 2 else { return nil }
        let b0 = buffer[readIndex]
        let b1 = buffer[readIndex + 1]

        // §5.2: RSV bits must be 0 unless an extension defines them.
        let reserved = b0 & 0x70
        if reserved & 0x30 != 0 || (reserved & 0x40 != 0 && !allowRSV1) { throw .reservedBitsSet(reserved >> 4) }
        guard let opcode = WebSocketOpcode(rawValue: b0 & 0x0F) else { throw .reservedOpcode(b0 & 0x0F) }
        let fin = b0 & 0x80 != 0
        let rsv1 = reserved & 0x40 != 0
        if opcode.isControl {
            if !fin { throw .fragmentedControlFrame }                 // §5.5
            if rsv1 { throw .reservedBitsSet(reserved >> 4) }         // RFC 7692 §6.1: data frames only
            if b1 & 0x7F > 125 { throw .controlFrameTooLong(UInt64(b1 & 0x7F)) } // §5.5
        } else if opcode == .continuation && rsv1 {
            throw .reservedBitsSet(reserved >> 4)                     // RFC 7692 §6.1: first frame only
        }
        // §5.1: clients mask, servers do not; either mistake fails the connection.
        let masked = b1 & 0x80 != 0
        switch peer {
        case .client where !masked: throw .unmaskedFrameFromClient
        case .server where masked: throw .maskedFrameFromServer
        default: break
        }

        let length7 = b1 & 0x7F
        let extended = length7 == 126 ? 2 : (length7 == 127 ? 8 : 0)
        let headerSize = 2 + extended + (masked ? 4 : 0)
        guard available >= 2 + extended else { return nil }
        var length = UInt64(length7)
        if extended > 0 {
            length = 0
            for i in 0..<extended { length = length << 8 | UInt64(buffer[readIndex + 2 + i]) }
            // §5.2: the most significant bit of a 64-bit length MUST be 0. Non-minimal encodings
            // are a sender's MUST, which receivers may tolerate; we do, like most stacks.
            if extended == 8 && length >> 63 != 0 { throw .payloadLengthOverflow }
        }
        // §10.4: enforce the limit from the header, before a byte of payload is buffered.
        if length > UInt64(maxFrameSize) { throw .frameTooLarge(length: length, limit: maxFrameSize) }
        guard available >= headerSize else { return nil }
        var key: WebSocketMaskKey?
        if masked {
            let k = readIndex + 2 + extended
            key = WebSocketMaskKey(buffer[k], buffer[k + 1], buffer[k + 2], buffer[k + 3])
        }
        readIndex += headerSize
        return WebSocketFrameHeader(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: key, payloadLength: length)
    }
}
