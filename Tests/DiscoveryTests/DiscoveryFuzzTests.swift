// Seeded fuzzing of the codec, the responder and the browser with random and mutated packets:
// no crash, decoded messages re-encode to themselves, and the work per packet stays bounded.
@testable import Discovery
import TestRandomness
import Testing

@Suite("Discovery fuzz")
struct DiscoveryFuzzTests {
    /// Real packets to mutate: python-zeroconf's and our own responder's and browser's.
    static func seeds() throws -> [[UInt8]] {
        var (responder, _) = try establishedResponder()
        var packets = [ZeroconfFixture.response, ZeroconfFixture.probe, ZeroconfFixture.browse]
        packets += responder.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr, unicastResponse: true)])), now: 10_000).packets.map(\.bytes)
        packets += responder.shutdown(now: 20_000).packets.map(\.bytes)
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = browser.receive(ReceivedPacket(bytes: ZeroconfFixture.response, interface: ifA, source: Endpoint(address: v4(10, 0, 0, 9), port: 5353)), now: 0)
        packets += run(&browser, until: 2000).map(\.action).packets.map(\.bytes)
        return packets
    }

    static func mutate(_ bytes: [UInt8], _ random: inout SeededRandom) -> [UInt8] {
        var out = bytes
        for _ in 0..<(1 + random.below(6)) {
            switch random.below(6) {
            case 0 where !out.isEmpty: out[random.below(out.count)] = UInt8(truncatingIfNeeded: random.next())
            case 1 where !out.isEmpty: out[random.below(out.count)] ^= UInt8(1 << random.below(8))
            case 2 where !out.isEmpty: out.removeSubrange(random.below(out.count)...)
            case 3: out.insert(UInt8(truncatingIfNeeded: random.next()), at: random.below(out.count + 1))
            case 4 where out.count > 12:
                // A compression pointer somewhere: loops, forward jumps, jumps into the header.
                let at = 12 + random.below(out.count - 12)
                out[at] = 0xC0 | UInt8(random.below(4))
                if at + 1 < out.count { out[at + 1] = UInt8(truncatingIfNeeded: random.next()) }
            case 5 where out.count > 12: out[4 + random.below(8)] = UInt8(truncatingIfNeeded: random.next())
            default: break
            }
        }
        return out
    }

    @Test func codecSurvivesRandomAndMutatedPackets() throws {
        var random = SeededRandom(seed: 0xD15C)
        let seeds = try Self.seeds()
        var decoded = 0
        for iteration in 0..<30_000 {
            let bytes = iteration % 4 == 0
                ? (0..<random.below(300)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                : Self.mutate(seeds[random.below(seeds.count)], &random)
            guard let message = try? DNSMessage(decoding: bytes) else { continue }
            decoded += 1
            // What decodes re-encodes (compressed) to a message that decodes to the same thing,
            // unless a TXT string cannot be written back or the message grew past the limit.
            if let again = try? message.encoded() {
                #expect(try DNSMessage(decoding: again) == message)
            }
        }
        #expect(decoded > 1000)
    }

    @Test func responderAndBrowserSurviveHostilePacketsWithBoundedWork() throws {
        var random = SeededRandom(seed: 0xBEEF)
        let seeds = try Self.seeds()
        var (responder, _) = try establishedResponder()
        var browser = makeBrowser(cacheLimit: 500)
        browser.addInterface(ifA, now: 0)
        var now: Int64 = 10_000
        for iteration in 0..<20_000 {
            now += Int64(random.below(50))
            let bytes = Self.mutate(seeds[random.below(seeds.count)], &random)
            let source = Endpoint(address: v4(10, 0, 0, UInt8(random.below(4) + 2)), port: random.chance(90) ? 5353 : 40_000)
            let received = ReceivedPacket(bytes: bytes, interface: random.chance(95) ? ifA : ifB, source: source, viaMulticast: random.chance(90))
            let out = responder.receive(received, now: now)
            #expect(out.count <= 8)
            _ = browser.receive(received, now: now)
            if iteration % 16 == 0 {
                // Ticks catch up; each returns a bounded batch.
                var rounds = 0
                while let due = responder.nextWakeup, due <= now, rounds < 10 {
                    #expect(responder.tick(now: now).count <= 16)
                    rounds += 1
                }
                #expect(rounds < 10)
                #expect(browser.tick(now: now).count <= 64)
                // A tick leaves nothing due: the socket layer's timer never spins.
                #expect((responder.nextWakeup ?? .max) > now && (browser.nextWakeup ?? .max) > now)
            }
            #expect(browser.cachedRecordCount <= 500)
        }
        // Whatever happened, the responder still answers for a name it owns.
        let owned = [responder.hostName] + (responder.name(of: MDNSServiceID(value: 1)).map { [$0] } ?? [])
        #expect(owned.count == 2)
    }
}
