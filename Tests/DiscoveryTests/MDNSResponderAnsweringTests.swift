// The responder answering queries (RFC 6762 §5.4, §6, §7; RFC 6763 §9, §12) on a manual clock.
@testable import Discovery
import TestRandomness
import Testing

@Suite("mDNS responder: answering")
struct MDNSResponderAnsweringTests {
    static let instance = (try? bigpeerType.prepending("Ship Node")) ?? .root
    static let host = name("node-1.local")
    static let linkLocal = IPAddress(bytes: [0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1]) ?? .v4(0)

    @Test func ptrQueryGetsDelayedMulticastAnswerWithSRVTXTAndAddressesInAdditional_RFC6762_6() throws {
        var (responder, _) = try establishedResponder()
        #expect(responder.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr)])), now: 10_000).isEmpty)
        let due = try #require(responder.nextWakeup)
        #expect((10_020...10_120).contains(due))
        let sent = responder.tick(now: due).packets
        #expect(sent.count == 1 && sent[0].destination == .multicast && sent[0].interface == ifA)
        let message = try DNSMessage(decoding: sent[0].bytes)
        #expect(message.header.isResponse && message.questions.isEmpty && message.header.id == 0)
        #expect(message.answers == [DNSResourceRecord(name: bigpeerType, data: .ptr(Self.instance), ttl: 4500)])
        #expect(Set(message.additionals.map(\.type)) == [.srv, .txt, .a, .aaaa])
    }

    @Test func sharedAnswerDelayIsSpreadOver20To120ms_RFC6762_6() throws {
        var delays: Set<Int64> = []
        for seed in 1...40 as ClosedRange<UInt64> {
            var responder = try makeResponder(seed: seed)
            _ = try responder.register(try bigpeerService(), now: 0)
            _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
            _ = run(&responder, until: 5000)
            _ = responder.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr)])), now: 10_000)
            delays.insert(try #require(responder.nextWakeup) - 10_000)
        }
        #expect(delays.allSatisfy { (20...120).contains($0) })
        #expect(delays.count > 20 && delays.contains { $0 < 45 } && delays.contains { $0 > 95 })
    }

    @Test func directSRVTXTAAndAAAAQueriesAreAnsweredAtOnce() throws {
        var (responder, _) = try establishedResponder()
        for (step, (question, type)) in [(Self.instance, DNSRecordType.srv), (Self.instance, .txt), (Self.host, .a), (Self.host, .aaaa)].enumerated() {
            // 2 s apart: each record may be multicast once a second.
            let sent = responder.receive(packet(query([DNSQuestion(name: question, type: type)])), now: 10_000 + Int64(step) * 2000).packets
            let answers = sentMessages(sent).flatMap(\.answers)
            #expect(answers.map(\.type) == [type], "\(type)")
        }
        let any = sentMessages(responder.receive(packet(query([DNSQuestion(name: Self.instance, type: .any)])), now: 100_000).packets)
        #expect(Set(any.flatMap(\.answers).map(\.type)) == [.srv, .txt])
    }

    @Test func srvAnswerCarriesOnlyTheAddressesOfTheInterfaceItLeavesBy_RFC6762_6_2() throws {
        var responder = try makeResponder()
        _ = try responder.register(try bigpeerService(), now: 0)
        _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
        _ = responder.setInterface(ifB, addresses: [v4(192, 168, 5, 1)], now: 0)
        _ = run(&responder, until: 5000)
        for (interface, address) in [(ifA, v4(10, 0, 0, 1)), (ifB, v4(192, 168, 5, 1))] {
            let sent = responder.receive(packet(query([DNSQuestion(name: Self.instance, type: .srv)]), on: interface), now: 10_000).packets
            #expect(sent.allSatisfy { $0.interface == interface })
            let records = sentMessages(sent).flatMap { $0.answers + $0.additionals }
            #expect(records.compactMap { if case let .a(a) = $0.data { a } else { nil } } == [address])
        }
    }

    @Test func missingTypeGetsNSECNegativeAnswer_RFC6762_6_1() throws {
        var (responder, _) = try establishedResponder(addresses: [v4(10, 0, 0, 1)])
        let sent = sentMessages(responder.receive(packet(query([DNSQuestion(name: Self.host, type: .aaaa)])), now: 10_000).packets)
        #expect(sent.flatMap(\.answers) == [DNSResourceRecord(name: Self.host, data: .nsec(next: Self.host, types: [.a]), ttl: 120, cacheFlush: true)])
        #expect(responder.counters.negativeAnswers == 1)
        // An A answer says in its additionals that there is no AAAA.
        let a = sentMessages(responder.receive(packet(query([DNSQuestion(name: Self.host, type: .a)])), now: 12_000).packets)
        #expect(a.flatMap(\.additionals).map(\.type) == [.nsec])
        // A name we do not own gets nothing.
        #expect(responder.receive(packet(query([DNSQuestion(name: name("other.local"), type: .a)])), now: 14_000).isEmpty)
    }

    @Test func serviceTypeEnumeration_RFC6763_9() throws {
        var (responder, _) = try establishedResponder()
        _ = responder.receive(packet(query([DNSQuestion(name: name("_services._dns-sd._udp.local"), type: .ptr)])), now: 10_000)
        let sent = sentMessages(run(&responder, until: 10_200).map(\.action).packets)
        #expect(sent.flatMap(\.answers) == [DNSResourceRecord(name: name("_services._dns-sd._udp.local"), data: .ptr(bigpeerType), ttl: 4500)])
    }

    @Test func knownAnswerWithHalfTTLSuppressesTheAnswer_RFC6762_7_1() throws {
        var (responder, _) = try establishedResponder()
        let ptr = DNSResourceRecord(name: bigpeerType, data: .ptr(Self.instance), ttl: 2250)
        let question = DNSQuestion(name: bigpeerType, type: .ptr)
        #expect(responder.receive(packet(query([question], known: [ptr])), now: 10_000).isEmpty)
        #expect(responder.nextWakeup == nil && responder.counters.knownAnswerSuppressions == 1)
        // Less than half the TTL left: answered.
        _ = responder.receive(packet(query([question], known: [ptr.with(ttl: 2249)])), now: 20_000)
        #expect(sentMessages(run(&responder, until: 20_200).map(\.action).packets).flatMap(\.answers).count == 1)
    }

    @Test func pythonZeroconfBrowseListingOurPTRGetsNoAnswer_RFC6762_7_1() throws {
        var (responder, _) = try establishedResponder()
        let browse = ReceivedPacket(bytes: ZeroconfFixture.browse, interface: ifA, source: Endpoint(address: v4(10, 0, 0, 50), port: 5353))
        #expect(responder.receive(browse, now: 10_000).isEmpty)
        #expect(run(&responder, until: 11_000).isEmpty)
        #expect(responder.counters.knownAnswerSuppressions == 1)
    }

    @Test func knownAnswersInAFollowingPacketCancelThePendingAnswer_RFC6762_7_2() throws {
        var (responder, _) = try establishedResponder()
        let truncated = DNSMessage(header: .query(truncated: true), questions: [DNSQuestion(name: bigpeerType, type: .ptr)])
        _ = responder.receive(packet(truncated), now: 10_000)
        let due = try #require(responder.nextWakeup)
        #expect((10_400...10_500).contains(due))
        let more = DNSMessage(header: .query(), answers: [DNSResourceRecord(name: bigpeerType, data: .ptr(Self.instance), ttl: 4500)])
        _ = responder.receive(packet(more), now: 10_100)
        #expect(responder.tick(now: due).isEmpty)
    }

    @Test func anotherQueriersKnownAnswersDoNotCancelAnAnswerOwedToTheFirst_RFC6762_7_2() throws {
        var (responder, _) = try establishedResponder()
        let question = DNSQuestion(name: bigpeerType, type: .ptr)
        let first = Endpoint(address: v4(10, 0, 0, 50), port: 5353), second = Endpoint(address: v4(10, 0, 0, 51), port: 5353)
        _ = responder.receive(packet(query([question]), from: first), now: 10_000)
        let known = DNSResourceRecord(name: bigpeerType, data: .ptr(Self.instance), ttl: 4500)
        _ = responder.receive(packet(query([question], known: [known]), from: second), now: 10_005)
        #expect(sentMessages(run(&responder, until: 10_200).map(\.action).packets).flatMap(\.answers).count == 1)
    }

    @Test func anotherRespondersIdenticalAnswerSuppressesOurs_RFC6762_7_4() throws {
        var (responder, _) = try establishedResponder()
        _ = responder.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr)])), now: 10_000)
        let answer = DNSMessage(header: .response(), answers: [DNSResourceRecord(name: bigpeerType, data: .ptr(Self.instance), ttl: 4500)])
        _ = responder.receive(packet(answer), now: 10_010)
        #expect(run(&responder, until: 11_000).isEmpty)
        #expect(responder.counters.duplicateAnswerSuppressions == 1)
    }

    @Test func recordIsMulticastAtMostOncePerSecond_RFC6762_6() throws {
        var (responder, _) = try establishedResponder()
        let srv = query([DNSQuestion(name: Self.instance, type: .srv)])
        #expect(responder.receive(packet(srv), now: 10_000).packets.count == 1)
        #expect(responder.receive(packet(srv), now: 10_500).packets.isEmpty)
        #expect(responder.receive(packet(srv), now: 11_000).packets.count == 1)
    }

    @Test func quQuestionIsAnsweredByUnicastUnlessNotMulticastForAQuarterTTL_RFC6762_5_4() throws {
        var (responder, _) = try establishedResponder()
        let source = Endpoint(address: v4(10, 0, 0, 50), port: 5353)
        let qu = query([DNSQuestion(name: Self.instance, type: .srv, unicastResponse: true)])
        // The SRV (TTL 120 s) was announced at ~1–2 s: within a quarter TTL (30 s), so unicast.
        let first = responder.receive(packet(qu, from: source), now: 10_000).packets
        #expect(first.map(\.destination) == [.unicast(source)])
        #expect(responder.counters.unicastResponses == 1)
        // 40 s later it has not been multicast for more than a quarter TTL: multicast.
        let later = responder.receive(packet(qu, from: source), now: 50_000).packets
        #expect(later.map(\.destination) == [.multicast])
    }

    @Test func legacyUnicastQueryGetsUnicastReplyEchoingIDWithoutCacheFlush_RFC6762_6_7() throws {
        var (responder, _) = try establishedResponder()
        let source = Endpoint(address: v4(10, 0, 0, 50), port: 40_000)
        let question = DNSQuestion(name: bigpeerType, type: .ptr)
        let sent = responder.receive(packet(query([question], id: 0x1234), from: source, viaMulticast: true), now: 10_000).packets
        #expect(sent.map(\.destination) == [.unicast(source)])
        let reply = try DNSMessage(decoding: sent[0].bytes)
        #expect(reply.header.id == 0x1234 && reply.header.isResponse)
        #expect(reply.questions == [question])
        let records = reply.answers + reply.additionals
        #expect(!records.isEmpty && records.allSatisfy { !$0.cacheFlush && $0.ttl <= 10 })
        #expect(responder.counters.legacyReplies == 1)
        #expect(responder.nextWakeup == nil)
    }

    @Test func probeForOurNameIsDefendedAtOnce_RFC6762_8_1() throws {
        var (responder, _) = try establishedResponder()
        let probe = try DNSMessage(decoding: ZeroconfFixture.probe)
        let sent = responder.receive(packet(probe), now: 1_900_000).packets
        #expect(sent.count == 1)
        #expect(Set(sentMessages(sent).flatMap(\.answers).map(\.type)) == [.srv, .txt])
    }

    @Test func malformedAndForeignPacketsAreIgnored() throws {
        var (responder, _) = try establishedResponder()
        #expect(responder.receive(ReceivedPacket(bytes: [1, 2, 3], interface: ifA, source: Endpoint(address: v4(1, 1, 1, 1), port: 5353)), now: 10_000).isEmpty)
        #expect(responder.counters.malformedPackets == 1)
        // An interface we were not told about.
        #expect(responder.receive(packet(query([DNSQuestion(name: Self.instance, type: .srv)]), on: InterfaceID(99)), now: 10_000).isEmpty)
        // A response from a port other than 5353 is not mDNS (§11): no conflict.
        let forged = DNSMessage(header: .response(), answers: [DNSResourceRecord(name: Self.instance, data: .txt([]), ttl: 9, cacheFlush: true)])
        _ = responder.receive(packet(forged, from: Endpoint(address: v4(10, 0, 0, 9), port: 1234)), now: 10_000)
        #expect(responder.counters.conflicts == 0)
    }
}
