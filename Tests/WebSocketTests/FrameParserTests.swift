import Testing
import TestRandomness
@testable import WebSocket

@Suite struct FrameParserTests {
    /// Frames covering every length encoding: 7-bit, 16-bit (126), 64-bit (127), and empty.
    static let sampleFrames: [[UInt8]] = {
        var rng = SeededRandom(seed: 42)
        return [0, 1, 125, 126, 300, 65_535, 65_536, 70_000].map { n in
            let payload = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            return frame(.binary, payload, key: WebSocketMaskKey(UInt8(n & 0xFF), 0xA5, 0x5A, 0x0F))
        }
    }()

    /// Runs a parser over `bytes` delivered in `chunks`, returning the frames it saw.
    func parse(_ bytes: [UInt8], chunks: [Int]) throws -> [ParsedFrame] {
        var parser = WebSocketFrameParser(peer: .client, maxFrameSize: 1 << 20)
        var frames: [ParsedFrame] = []
        var offset = 0
        for size in chunks + [bytes.count] where offset < bytes.count {
            let end = min(bytes.count, offset + size)
            parser.append(Array(bytes[offset..<end]))
            offset = end
            while let event = try parser.next() {
                switch event {
                case .header(let h): frames.append(ParsedFrame(opcode: h.opcode, fin: h.fin, rsv1: h.rsv1, masked: h.maskKey != nil, payload: []))
                case .payload(let p):
                    #expect(!p.isEmpty)
                    frames[frames.count - 1].payload += p
                case .end: break
                }
            }
            #expect(parser.bufferedByteCount <= WebSocketFrameWriter.maxHeaderSize)
        }
        return frames
    }

    func expected(_ bytes: [UInt8]) throws -> [ParsedFrame] { try parse(bytes, chunks: [bytes.count]) }

    @Test func lengths_decodeAllEncodings() throws {
        for (bytes, n) in zip(Self.sampleFrames, [0, 1, 125, 126, 300, 65_535, 65_536, 70_000]) {
            let frames = try expected(bytes)
            #expect(frames.count == 1)
            #expect(frames[0].payload.count == n)
            #expect(frames[0].masked)
        }
        // Header sizes: 2 + 4 (mask) for ≤125, +2 for 16-bit, +8 for 64-bit lengths.
        #expect(Self.sampleFrames[2].count == 125 + 6)
        #expect(Self.sampleFrames[3].count == 126 + 8)
        #expect(Self.sampleFrames[6].count == 65_536 + 14)
    }

    @Test func everySplitPoint_givesSameFrames() throws {
        let stream = frame(.text, Array("héllo wörld".utf8), fin: false) + frame(.ping, [1, 2, 3])
            + frame(.continuation, Array(" more".utf8)) + Self.sampleFrames[3] + frame(.close, [0x03, 0xE8])
        let whole = try expected(stream)
        #expect(whole.map(\.opcode) == [.text, .ping, .continuation, .binary, .close])
        for split in 0...stream.count {
            #expect(try parse(stream, chunks: [split]) == whole, "split at \(split)")
        }
    }

    @Test func oneAndTwoByteChunks_giveSameFrames() throws {
        let stream = Self.sampleFrames.prefix(5).flatMap { $0 }
        let whole = try expected(stream)
        #expect(try parse(stream, chunks: Array(repeating: 1, count: stream.count)) == whole)
        #expect(try parse(stream, chunks: Array(repeating: 2, count: stream.count / 2 + 1)) == whole)
    }

    @Test func randomChunkings_giveSameFrames() throws {
        let stream = Self.sampleFrames.flatMap { $0 }
        let whole = try expected(stream)
        var rng = SeededRandom(seed: 7)
        for _ in 0..<20 {
            #expect(try parse(stream, chunks: rng.pieceSizes(total: stream.count, maxPiece: 5000)) == whole)
        }
    }

    func violation(_ bytes: [UInt8], peer: WebSocketRole = .client, maxFrameSize: Int = 1 << 20, rsv1: Bool = false) -> WebSocketProtocolError? {
        var parser = WebSocketFrameParser(peer: peer, maxFrameSize: maxFrameSize, allowRSV1: rsv1)
        parser.append(bytes)
        do {
            while try parser.next() != nil {}
            return nil
        } catch {
            return error
        }
    }

    @Test func reservedBits_fail1002() {
        for bit: UInt8 in [0x40, 0x20, 0x10] {
            let e = violation([0x80 | bit | 0x2, 0x80, 0, 0, 0, 0])
            #expect(e?.closeCode == .protocolError)
        }
        // RSV1 is allowed on data frames only when deflate is negotiated…
        #expect(violation([0xC2, 0x80, 0, 0, 0, 0], rsv1: true) == nil)
        // …and never on control or continuation frames (RFC 7692 §6.1).
        #expect(violation([0xC9, 0x80, 0, 0, 0, 0], rsv1: true) == .reservedBitsSet(4))
        #expect(violation([0xC0, 0x80, 0, 0, 0, 0], rsv1: true) == .reservedBitsSet(4))
    }

    @Test func reservedOpcodes_fail1002() {
        for op: UInt8 in [3, 4, 5, 6, 7, 0xB, 0xC, 0xD, 0xE, 0xF] {
            #expect(violation([0x80 | op, 0x80, 0, 0, 0, 0]) == .reservedOpcode(op))
        }
    }

    @Test func controlFrameRules_fail1002_fromTheHeaderAlone() {
        #expect(violation([0x09, 0x80]) == .fragmentedControlFrame)           // ping without FIN
        #expect(violation([0x88, 0xFE]) == .controlFrameTooLong(126))          // 2 header bytes suffice
        #expect(WebSocketProtocolError.controlFrameTooLong(126).closeCode == .protocolError)
        #expect(violation(frame(.ping, Array(repeating: 1, count: 125))) == nil)
    }

    @Test func masking_requiredFromClients_forbiddenFromServers() {
        #expect(violation([0x82, 0x00], peer: .client) == .unmaskedFrameFromClient)
        #expect(violation([0x82, 0x80, 1, 2, 3, 4], peer: .server) == .maskedFrameFromServer)
        #expect(violation(frame(.binary, [1, 2], from: .server), peer: .server) == nil)
    }

    @Test func sixtyFourBitLength_withTopBitSet_fails1002() {
        let header: [UInt8] = [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0]
        #expect(violation(header) == .payloadLengthOverflow)
    }

    @Test func frameTooLarge_fails1009_beforeAnyPayload() {
        // Only the header of a 2 MiB frame: the parser must refuse without waiting for payload.
        let header: [UInt8] = [0x82, 0xFF, 0, 0, 0, 0, 0, 0x20, 0, 0]
        let e = violation(header, maxFrameSize: 1 << 20)
        #expect(e == .frameTooLarge(length: 2 << 20, limit: 1 << 20))
        #expect(e?.closeCode == .messageTooBig)
    }

    @Test func afterAnError_theParserStaysFailed() {
        var parser = WebSocketFrameParser(peer: .client, maxFrameSize: 1024)
        parser.append([0x83, 0x80, 0, 0, 0, 0])
        #expect(throws: WebSocketProtocolError.reservedOpcode(3)) { try parser.next() }
        parser.append(frame(.binary, [1]))
        #expect(throws: WebSocketProtocolError.reservedOpcode(3)) { try parser.next() }
    }

    @Test func nonMinimalLengths_areTolerated() throws {
        // 5 bytes announced in the 16-bit form (RFC 6455 §5.2 makes minimality the sender's duty).
        let bytes: [UInt8] = [0x82, 0xFE, 0x00, 0x05, 0, 0, 0, 0, 1, 2, 3, 4, 5]
        #expect(try expected(bytes).first?.payload == [1, 2, 3, 4, 5])
    }

    @Test func mask_matchesBytewiseDefinition_atEveryOffset() {
        var rng = SeededRandom(seed: 3)
        let key = WebSocketMaskKey(0x12, 0x34, 0x56, 0x78)
        let keyBytes: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        for length in [0, 1, 7, 8, 9, 31, 64, 100] {
            let data = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for offset in 0..<4 {
                var masked = data
                masked.withUnsafeMutableBytes { applyMask(key, offset: offset, to: $0) }
                let naive = data.enumerated().map { $0.element ^ keyBytes[($0.offset + offset) % 4] }
                #expect(masked == naive)
            }
        }
    }

    @Test func writer_serverFramesUnmasked_clientFramesMasked() throws {
        let server = frame(.text, Array("hi".utf8), from: .server)
        #expect(server == [0x81, 0x02, 0x68, 0x69])
        // RFC 6455 §5.7 example: a masked "Hello" from a client.
        let client = frame(.text, Array("Hello".utf8), key: WebSocketMaskKey(0x37, 0xFA, 0x21, 0x3D))
        #expect(client == [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58])
    }
}
