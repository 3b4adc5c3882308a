// WebSocket frame format (RFC 6455 §5.2), masking (§5.3) and the frame writer.
//
//      0                   1                   2                   3
//      0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//     +-+-+-+-+-------+-+-------------+-------------------------------+
//     |F|R|R|R| opcode|M| Payload len |    Extended payload length    |
//     |I|S|S|S|  (4)  |A|     (7)     |             (16/64)           |
//     |N|V|V|V|       |S|             |   (if payload len==126/127)   |
//     | |1|2|3|       |K|             |                               |
//     +-+-+-+-+-------+-+-------------+ - - - - - - - - - - - - - - - +
//     |     Extended payload length continued, if payload len == 127  |
//     + - - - - - - - - - - - - - - - +-------------------------------+
//     |                               |Masking-key, if MASK set to 1  |
//     +-------------------------------+-------------------------------+
//     | Masking-key (continued)       |          Payload Data         |
//     +-------------------------------- - - - - - - - - - - - - - - - +
//
// Lengths: 0–125 in the 7-bit field; 126 → the next 2 bytes (network order); 127 → the next
// 8 bytes, whose most significant bit must be 0. Clients mask every frame, servers never do (§5.1).

/// A frame opcode (§5.2). Reserved values never become an `Opcode`: the parser rejects them.
public enum WebSocketOpcode: UInt8, Sendable, Hashable {
    case continuation = 0x0
    case text = 0x1
    case binary = 0x2
    case close = 0x8
    case ping = 0x9
    case pong = 0xA

    /// Control frames have the high bit of the opcode set (§5.5).
    public var isControl: Bool { rawValue & 0x8 != 0 }
}

/// Which end of the connection this endpoint is: decides masking in both directions (§5.1).
public enum WebSocketRole: Sendable, Hashable {
    case server
    case client
}

/// The 4-byte masking key of a client frame (§5.3), stored in wire order.
public struct WebSocketMaskKey: Hashable, Sendable {
    public var bytes: (UInt8, UInt8, UInt8, UInt8)
    public init(_ b0: UInt8, _ b1: UInt8, _ b2: UInt8, _ b3: UInt8) { bytes = (b0, b1, b2, b3) }

    public static func == (a: Self, b: Self) -> Bool { a.bytes == b.bytes }
    public func hash(into h: inout Hasher) { h.combine(bytes.0); h.combine(bytes.1); h.combine(bytes.2); h.combine(bytes.3) }

    /// The key as it lies in memory, rotated so that byte `offset % 4` comes first: masking a
    /// chunk that starts `offset` bytes into the payload uses the key from that phase.
    func word64(rotatedBy offset: Int) -> UInt64 {
        withUnsafeBytes(of: bytes) { k in
            var w: UInt64 = 0
            for i in 0..<8 { w |= UInt64(k[(offset + i) & 3]) << (8 * UInt64(i)) }
            return UInt64(littleEndian: w) // byte i in memory is key byte (offset + i) % 4
        }
    }
}

/// XORs `buffer` with the masking key, as if the buffer started `offset` bytes into the payload
/// (§5.3: `transformed[i] = original[i] XOR key[(offset + i) mod 4]`). Eight bytes per step.
func applyMask(_ key: WebSocketMaskKey, offset: Int, to buffer: UnsafeMutableRawBufferPointer) {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return }
    let word = key.word64(rotatedBy: offset)
    var i = 0
    let count = buffer.count
    // `loadUnaligned`/`storeBytes` on x86 and arm64 compile to plain 8-byte moves.
    while i + 8 <= count {
        let v = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
        base.storeBytes(of: v ^ word, toByteOffset: i, as: UInt64.self)
        i += 8
    }
    withUnsafeBytes(of: key.bytes) { k in
        while i < count {
            base.storeBytes(of: base.load(fromByteOffset: i, as: UInt8.self) ^ k[(offset + i) & 3],
                            toByteOffset: i, as: UInt8.self)
            i += 1
        }
    }
}

/// The fixed part of a frame, known once its header has been read.
public struct WebSocketFrameHeader: Hashable, Sendable {
    public var fin: Bool
    /// RSV1: "compressed" on the first frame of a message when permessage-deflate is on (RFC 7692 §6).
    public var rsv1: Bool
    public var opcode: WebSocketOpcode
    public var maskKey: WebSocketMaskKey?
    public var payloadLength: UInt64

    public init(fin: Bool, rsv1: Bool = false, opcode: WebSocketOpcode, maskKey: WebSocketMaskKey?, payloadLength: UInt64) {
        self.fin = fin
        self.rsv1 = rsv1
        self.opcode = opcode
        self.maskKey = maskKey
        self.payloadLength = payloadLength
    }
}

/// Serializes frames. Server frames go out unmasked; client frames are masked with a fresh key
/// (§5.3: unpredictable, one per frame), which the caller supplies.
public enum WebSocketFrameWriter {
    /// The largest header: 2 bytes + 8-byte length + 4-byte mask key.
    public static let maxHeaderSize = 14

    /// Appends one frame to `out`. Lengths always use the minimal encoding (§5.2).
    public static func append(
        fin: Bool, rsv1: Bool = false, opcode: WebSocketOpcode, maskKey: WebSocketMaskKey?,
        payload: UnsafeRawBufferPointer, to out: inout [UInt8]
    ) {
        let length = payload.count
        out.reserveCapacity(out.count + maxHeaderSize + length)
        out.append((fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | opcode.rawValue)
        let maskBit: UInt8 = maskKey == nil ? 0 : 0x80
        if length <= 125 {
            out.append(maskBit | UInt8(length))
        } else if length <= 0xFFFF {
            out.append(maskBit | 126)
            out.append(UInt8(length >> 8))
            out.append(UInt8(length & 0xFF))
        } else {
            out.append(maskBit | 127)
            let l = UInt64(length)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((l >> UInt64(shift)) & 0xFF)) }
        }
        let start: Int
        if let key = maskKey {
            out.append(key.bytes.0); out.append(key.bytes.1); out.append(key.bytes.2); out.append(key.bytes.3)
            start = out.count
        } else {
            start = out.count
        }
        out.append(contentsOf: payload)
        if let key = maskKey {
            out.withUnsafeMutableBytes { all in
                applyMask(key, offset: 0, to: UnsafeMutableRawBufferPointer(rebasing: all[start...]))
            }
        }
    }

    /// Convenience over a byte array.
    public static func append(
        fin: Bool, rsv1: Bool = false, opcode: WebSocketOpcode, maskKey: WebSocketMaskKey?,
        payload: [UInt8], to out: inout [UInt8]
    ) {
        payload.withUnsafeBytes { append(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: maskKey, payload: $0, to: &out) }
    }
}
