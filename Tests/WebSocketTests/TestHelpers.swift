import Sockets
@testable import WebSocket

/// A manual clock: tests move `now` by hand, so timeouts run instantly and deterministically.
struct ManualClock {
    var now = NanoTime(nanoseconds: 1_000_000_000)
    mutating func advance(_ d: Duration) { now = now.adding(d) }
}

/// Encodes one frame as a peer with `role` would send it (clients mask).
func frame(
    _ opcode: WebSocketOpcode, _ payload: [UInt8], fin: Bool = true, rsv1: Bool = false,
    from role: WebSocketRole = .client, key: WebSocketMaskKey = WebSocketMaskKey(0x37, 0xFA, 0x21, 0x3D)
) -> [UInt8] {
    var out: [UInt8] = []
    WebSocketFrameWriter.append(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: role == .client ? key : nil,
                                payload: payload, to: &out)
    return out
}

/// A whole frame as seen by a parser: header plus reassembled payload.
struct ParsedFrame: Equatable {
    var opcode: WebSocketOpcode
    var fin: Bool
    var rsv1: Bool
    var masked: Bool
    var payload: [UInt8]
}

/// Parses every complete frame in `bytes` written by `sender`.
func parseFrames(_ bytes: [UInt8], sentBy sender: WebSocketRole, maxFrameSize: Int = 1 << 26) throws -> [ParsedFrame] {
    var parser = WebSocketFrameParser(peer: sender, maxFrameSize: maxFrameSize, allowRSV1: true)
    parser.append(bytes)
    var frames: [ParsedFrame] = []
    while let event = try parser.next() {
        switch event {
        case .header(let h):
            frames.append(ParsedFrame(opcode: h.opcode, fin: h.fin, rsv1: h.rsv1, masked: h.maskKey != nil, payload: []))
        case .payload(let p):
            frames[frames.count - 1].payload += p
        case .end:
            break
        }
    }
    return frames
}

extension WebSocketConnection {
    /// Receives bytes and keeps going while a delivered message left input behind, as an I/O
    /// adapter does (see `receive`).
    mutating func receiveAll(_ bytes: [UInt8], now: NanoTime) -> [WebSocketAction] {
        var actions = receive(bytes, now: now)
        while hasBufferedInput {
            let more = receive([], now: now)
            if more.isEmpty { break }
            actions += more
        }
        return actions
    }
}

extension [WebSocketAction] {
    var written: [UInt8] {
        var out: [UInt8] = []
        for case .write(let b) in self { out += b }
        return out
    }
    var delivered: [WebSocketMessage] { compactMap { if case .deliver(let m) = $0 { m } else { nil } } }
    var closeCode: WebSocketCloseCode? {
        for a in self { if case .closed(let code, _) = a { return code } }
        return nil
    }
    var closesTransport: Bool { contains(.closeTransport) }
}

/// The code in the Close frame a connection wrote, if any.
func sentCloseCode(_ actions: [WebSocketAction], by role: WebSocketRole) throws -> UInt16? {
    let frames = try parseFrames(actions.written, sentBy: role)
    guard let close = frames.first(where: { $0.opcode == .close }), close.payload.count >= 2 else { return nil }
    return UInt16(close.payload[0]) << 8 | UInt16(close.payload[1])
}
