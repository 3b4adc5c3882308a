import Sockets
import SyncPeer
import SyncProtocol
import Testing
import TestRandomness

/// The BLE SDU framing (PROTOCOL.md §2.1): chunking to the MTU, reassembly, strict bounds, and the
/// keepalive/supervision clock.
@Suite struct PacketFramingTests {
    @Test func messagesSurviveChunkingAtEveryMTU() throws {
        var rng = SeededRandom(seed: 0xB1E)
        for mtu in [23, 24, 64, 247, 512, 65535] {
            var assembler = PacketAssembler(maxMessageSize: 100_000)
            for _ in 0..<20 {
                let message = (0..<(1 + rng.below(5000))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                let sdus = PacketFraming.sdus(message, mtu: mtu)
                #expect(sdus.allSatisfy { $0.count <= mtu })
                #expect(sdus.count == (4 + message.count + mtu - 1) / mtu)
                #expect(sdus.count <= PacketFraming.maximumSDUs(forLength: message.count))
                var outputs: [PacketAssembler.Output] = []
                for sdu in sdus { outputs.append(try assembler.feed(sdu)) }
                #expect(outputs.last == .message(message))
                #expect(outputs.dropLast().allSatisfy { $0 == .partial })
                #expect(assembler.bufferedBytes == 0)
            }
            #expect(try assembler.feed(PacketFraming.keepalive) == .keepalive)
        }
        // The first SDU holds the length big-endian, then the message.
        #expect(PacketFraming.sdus([7, 8, 9], mtu: 23) == [[0, 0, 0, 3, 7, 8, 9]])
        #expect(PacketFraming.sdus(Array(repeating: 1, count: 20), mtu: 23) == [[0, 0, 0, 20] + Array(repeating: 1, count: 19), [1]])
    }

    @Test func malformedSDUsAreRefusedWithTheProtocolsCloseCodes() throws {
        func error(_ sdus: [[UInt8]], limit: Int = 1000) -> PacketAssembler.FramingError? {
            var a = PacketAssembler(maxMessageSize: limit)
            do {
                for sdu in sdus { _ = try a.feed(sdu) }
                return nil
            } catch {
                return error
            }
        }
        #expect(error([[0, 0, 3]]) == .shortFirstSDU(3))
        #expect(error([[0, 0, 0x03, 0xE9]]) == .tooLarge(1001, limit: 1000))
        #expect(error([[0, 0, 0x03, 0xE9]])?.closeCode == .messageTooLarge)
        #expect(error([[0xFF, 0xFF, 0xFF, 0xFF] + Array(repeating: 0, count: 100)], limit: 16 << 20) == .tooLarge(UInt32.max, limit: 16 << 20))
        // Two messages in one SDU, and a continuation running past its message.
        #expect(error([[0, 0, 0, 1, 5, 0, 0, 0, 1, 6]]) == .overrun(extra: 5))
        #expect(error([[0, 0, 0, 30] + Array(repeating: 1, count: 19), Array(repeating: 1, count: 12)]) == .overrun(extra: 1))
        #expect(error([[0, 0, 0, 0, 1]]) == .overrun(extra: 1))  // a keepalive carries nothing
        #expect(error([[]]) == .emptySDU)
        // A 100-byte message may take at most ceil(104 / 23) = 5 SDUs, whatever their sizes.
        let dribble: [[UInt8]] = [[0, 0, 0, 100]] + Array(repeating: [1], count: 5)
        #expect(error(dribble) == .tooManySDUs(6, length: 100))
        #expect(error(dribble)?.closeCode == .protocolViolation)
    }

    @Test func supervisionSendsKeepalivesWhenIdleAndCallsSilenceALoss() {
        let start = NanoTime(nanoseconds: 1_000_000_000)
        var s = LinkSupervision(keepaliveInterval: .seconds(5), timeout: .seconds(20), now: start)
        #expect(s.check(at: start.adding(.seconds(4))) == .none)
        #expect(s.nextDeadline == start.adding(.seconds(5)))
        #expect(s.check(at: start.adding(.seconds(5))) == .sendKeepalive)
        s.sent(at: start.adding(.seconds(5)))
        #expect(s.check(at: start.adding(.seconds(6))) == .none)
        s.received(at: start.adding(.seconds(15)))
        #expect(s.check(at: start.adding(.seconds(34))) == .sendKeepalive)  // sent nothing since 5 s
        #expect(s.check(at: start.adding(.seconds(35))) == .lost)  // heard nothing since 15 s
        s.received(at: start.adding(.seconds(10)))  // an earlier reading never moves it back
        #expect(s.lastReceived == start.adding(.seconds(15)))
    }
}
