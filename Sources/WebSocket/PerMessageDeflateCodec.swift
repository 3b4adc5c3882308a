// permessage-deflate compression and decompression with zlib (RFC 7692 §7.2).
//
// Sending (§7.2.1): deflate the whole message with Z_SYNC_FLUSH into raw DEFLATE (negative
// windowBits: no zlib header or trailer), strip the trailing empty stored block 00 00 FF FF,
// send with RSV1 on the first frame only. Receiving (§7.2.2): inflate each frame's payload as it
// arrives, append 00 00 FF FF after the last frame, inflate that too. "Context takeover" (the
// default) keeps the LZ77 window across messages; `*_no_context_takeover` resets it after each.
//
// Decompression is bounded: output leaves zlib in 16 KiB pieces through a sink that enforces the
// message limit before anything is kept, so a zip bomb costs at most limit + 16 KiB and ends with
// 1009, never an out-of-memory. zlib state is allocated lazily on the first compressed message
// (a deflater at window 15 / memLevel 8 is ~256 KiB, an inflater ~40 KiB), so idle connections
// that never compress pay nothing. Without context takeover nothing carries over between
// messages, so an idle connection frees that state (`releaseIdleState`, called when the
// keep-alive finds it idle); re-creating it per message instead would cost ~10 µs each.
import CZlib

/// One zlib stream. A class because `z_stream` must not move while zlib holds pointers into it;
/// owned by one connection on one thread, hence not Sendable.
final class ZlibStream {
    private let isDeflate: Bool
    let stream: UnsafeMutablePointer<z_stream>

    /// A raw-deflate compressor; nil if zlib rejects the parameters or cannot allocate.
    init?(deflateLevel level: Int32, windowBits: Int, memoryLevel: Int32) {
        isDeflate = true
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = deflateInit2_(stream, level, Z_DEFLATED, -Int32(windowBits), memoryLevel, Z_DEFAULT_STRATEGY,
                               zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard rc == Z_OK else { stream.deallocate(); return nil }
    }

    /// A raw-deflate decompressor; nil if zlib cannot allocate.
    init?(inflateWindowBits windowBits: Int) {
        isDeflate = false
        stream = .allocate(capacity: 1)
        stream.initialize(to: z_stream())
        let rc = inflateInit2_(stream, -Int32(windowBits), zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard rc == Z_OK else { stream.deallocate(); return nil }
    }

    func reset() {
        if isDeflate { deflateReset(stream) } else { inflateReset(stream) }
    }

    deinit {
        if isDeflate { deflateEnd(stream) } else { inflateEnd(stream) }
        stream.deallocate()
    }
}

/// The per-connection compressor and decompressor for one negotiated agreement.
final class PerMessageDeflateCodec {
    static let tail: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]
    static let chunkSize = 16 * 1024

    let agreement: PerMessageDeflateAgreement
    private let send: (noContextTakeover: Bool, windowBits: Int)
    private let receive: (noContextTakeover: Bool, windowBits: Int)
    private var deflater: ZlibStream?
    private var inflater: ZlibStream?
    /// The current message's DEFLATE stream hit a final block (see `inflate`).
    private var inflateEnded = false

    init(agreement: PerMessageDeflateAgreement, role: WebSocketRole) {
        self.agreement = agreement
        send = agreement.sendParameters(role: role)
        receive = agreement.receiveParameters(role: role)
    }

    /// Whether zlib state is currently allocated (memory accounting and tests).
    var hasAllocatedState: (deflater: Bool, inflater: Bool) { (deflater != nil, inflater != nil) }

    /// Compresses a whole message, or returns nil to send it uncompressed: too short to gain,
    /// a negotiated 8-bit window zlib cannot honour (see the negotiation file), or zlib failure.
    func compress(_ message: UnsafeRawBufferPointer) -> [UInt8]? {
        // zlib counts in UInt32: a (theoretical) 4 GiB message simply goes out uncompressed.
        guard message.count >= agreement.minimumSizeToCompress, send.windowBits >= 9,
              message.count < Int(UInt32.max) else { return nil }
        if deflater == nil {
            deflater = ZlibStream(deflateLevel: agreement.compressionLevel, windowBits: send.windowBits,
                                  memoryLevel: agreement.memoryLevel)
        }
        guard let z = deflater else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(message.count / 2 + 64)
        let ok = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.chunkSize) { scratch -> Bool in
            z.stream.pointee.next_in = UnsafeMutablePointer(mutating: message.baseAddress?.assumingMemoryBound(to: UInt8.self))
            z.stream.pointee.avail_in = UInt32(message.count)
            repeat {
                z.stream.pointee.next_out = scratch.baseAddress
                z.stream.pointee.avail_out = UInt32(Self.chunkSize)
                let rc = deflate(z.stream, Z_SYNC_FLUSH)
                guard rc == Z_OK || rc == Z_BUF_ERROR else { return false }
                out.append(contentsOf: scratch[0..<(Self.chunkSize - Int(z.stream.pointee.avail_out))])
            } while z.stream.pointee.avail_out == 0 || z.stream.pointee.avail_in > 0
            z.stream.pointee.next_in = nil
            z.stream.pointee.next_out = nil
            return true
        }
        // §7.2.1: a sync flush ends with 00 00 FF FF, which the sender removes.
        guard ok, out.count >= 4, Array(out[(out.count - 4)...]) == Self.tail else {
            deflater = nil // unknown state: start over with a fresh stream next time
            return nil
        }
        out.removeLast(4)
        if send.noContextTakeover { z.reset() }
        return out
    }

    /// Inflates one frame's worth of a compressed message, handing output to `sink` in pieces of
    /// at most 16 KiB. Call with `isFinal` on the last frame: the stripped tail is put back.
    func decompress(
        _ input: UnsafeRawBufferPointer, isFinal: Bool,
        sink: (UnsafeRawBufferPointer) throws(WebSocketProtocolError) -> Void
    ) throws(WebSocketProtocolError) {
        if inflater == nil { inflater = ZlibStream(inflateWindowBits: max(9, receive.windowBits)) }
        guard let z = inflater else { throw .invalidCompressedData }
        if !inflateEnded { try inflate(z, input, sink: sink) }
        if isFinal {
            defer { inflateEnded = false }
            // After a BFINAL block the stream is already reset: the tail belongs to no stream.
            if inflateEnded { return }
            var failure: WebSocketProtocolError?
            Self.tail.withUnsafeBytes { t in
                do throws(WebSocketProtocolError) { try inflate(z, t, sink: sink) } catch { failure = error }
            }
            if let failure { throw failure }
            if receive.noContextTakeover { z.reset() }
        }
    }

    /// Frees zlib state that holds nothing needed later: a direction without context takeover,
    /// between messages. With context takeover the window is part of the protocol state.
    func releaseIdleState() {
        if send.noContextTakeover { deflater = nil }
        if receive.noContextTakeover && !inflateEnded { inflater = nil }
    }

    /// Drops the decompression state after a failed message so nothing half-inflated survives.
    func abandonReceive() {
        inflater = nil
        inflateEnded = false
    }

    private func inflate(
        _ z: ZlibStream, _ input: UnsafeRawBufferPointer,
        sink: (UnsafeRawBufferPointer) throws(WebSocketProtocolError) -> Void
    ) throws(WebSocketProtocolError) {
        guard input.count > 0 else { return }
        // zlib counts in UInt32: feed anything larger in slices.
        let slice = 1 << 30
        if input.count > slice {
            var start = 0
            while start < input.count && !inflateEnded {
                let end = min(input.count, start + slice)
                try inflate(z, UnsafeRawBufferPointer(rebasing: input[start..<end]), sink: sink)
                start = end
            }
            return
        }
        let result: WebSocketProtocolError? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Self.chunkSize) { scratch in
            z.stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
            z.stream.pointee.avail_in = UInt32(input.count)
            defer { z.stream.pointee.next_in = nil; z.stream.pointee.next_out = nil }
            while true {
                z.stream.pointee.next_out = scratch.baseAddress
                z.stream.pointee.avail_out = UInt32(Self.chunkSize)
                let rc = CZlib.inflate(z.stream, Z_SYNC_FLUSH)
                let produced = Self.chunkSize - Int(z.stream.pointee.avail_out)
                if produced > 0 {
                    do throws(WebSocketProtocolError) { try sink(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: scratch[0..<produced]))) } catch { return error }
                }
                switch rc {
                case Z_OK:
                    if z.stream.pointee.avail_in == 0 && z.stream.pointee.avail_out > 0 { return nil }
                case Z_BUF_ERROR:
                    return nil // no progress possible: all input consumed, nothing pending
                case Z_STREAM_END:
                    // A block with BFINAL ended the stream (RFC 7692 §7.2.3.4 lets a sender do
                    // that). The next message starts a new stream; the rest of this one
                    // (normally nothing but our re-added tail) is ignored.
                    z.reset()
                    inflateEnded = true
                    return nil
                default:
                    return .invalidCompressedData // Z_DATA_ERROR, Z_NEED_DICT, Z_MEM_ERROR
                }
            }
        }
        if let result { throw result }
    }
}
