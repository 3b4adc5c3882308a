import Testing
@testable import Sync
@testable import SyncProtocol

@Suite struct StreamFramingTests {
    static let messages = SampleMessages.all.map { $0.encode() }

    @Test func everySplitPoint_yieldsTheSameMessages() throws {
        let stream = Self.messages.flatMap(StreamFraming.frame)
        for split in 0...stream.count {
            var d = StreamFrameDecoder(maxMessageSize: 1 << 20)
            var got = try d.feed(stream[0..<split])
            got += try d.feed(stream[split...])
            #expect(got == Self.messages)
            #expect(d.bufferedBytes == 0)
        }
    }

    @Test func bleChunksOfAnyMTU_reassemble() throws {
        let stream = Self.messages.flatMap(StreamFraming.frame)
        for mtu in [1, 2, 3, 7, 23, 64, 247, 512, 4096] {
            var d = StreamFrameDecoder(maxMessageSize: 1 << 20)
            var got: [[UInt8]] = []
            for chunk in StreamFraming.chunks(stream, mtu: mtu) {
                #expect(chunk.count <= mtu)
                got += try d.feed(chunk)
            }
            #expect(got == Self.messages, "mtu \(mtu)")
        }
    }

    @Test func randomChunkings_yieldTheSameMessages() throws {
        var rng = SeededRandom(seed: 42)
        let stream = Self.messages.flatMap(StreamFraming.frame)
        for _ in 0..<200 {
            var d = StreamFrameDecoder(maxMessageSize: 1 << 20)
            var got: [[UInt8]] = []
            var i = 0
            while i < stream.count {
                let n = Int.random(in: 1...40, using: &rng)
                got += try d.feed(stream[i..<min(i + n, stream.count)])
                i += n
            }
            #expect(got == Self.messages)
        }
    }

    /// A served link's first message (the peer's hello) is held to `maxFirstMessageSize` from its
    /// length prefix; the messages after it to `maxMessageSize`.
    @Test func firstMessage_isHeldToItsOwnLimit() throws {
        var d = StreamFrameDecoder(maxMessageSize: 1000, maxFirstMessageSize: 100)
        #expect(throws: StreamFrameDecoder.FramingError.invalidLength(101, limit: 100)) { try d.feed([0, 0, 0, 101]) }
        var e = StreamFrameDecoder(maxMessageSize: 1000, maxFirstMessageSize: 100)
        let first = [UInt8](repeating: 1, count: 100), second = [UInt8](repeating: 2, count: 1000)
        #expect(try e.feed(StreamFraming.frame(first) + StreamFraming.frame(second)) == [first, second])
    }

    @Test func zeroAndOversizedLengths_areRejectedBeforeBuffering() {
        var d = StreamFrameDecoder(maxMessageSize: 100)
        #expect(throws: StreamFrameDecoder.FramingError.invalidLength(0, limit: 100)) { try d.feed([0, 0, 0, 0]) }
        var e = StreamFrameDecoder(maxMessageSize: 100)
        #expect(throws: StreamFrameDecoder.FramingError.invalidLength(0xFFFF_FFFF, limit: 100)) { try e.feed([0xFF, 0xFF, 0xFF, 0xFF, 1]) }
        #expect(StreamFrameDecoder.FramingError.invalidLength(101, limit: 100).closeCode == .messageTooLarge)
        #expect(StreamFrameDecoder.FramingError.invalidLength(0, limit: 100).closeCode == .protocolViolation)
        var f = StreamFrameDecoder(maxMessageSize: 100)
        #expect((try? f.feed([0, 0, 0, 100] + [UInt8](repeating: 0, count: 99))) == [])
        #expect(f.bufferedBytes == 103, "an incomplete frame holds at most 4 + max bytes")
    }
}
