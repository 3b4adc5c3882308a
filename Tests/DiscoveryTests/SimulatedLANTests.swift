// Responders and browsers on one simulated link: name conflicts between two hosts, discovery,
// goodbyes, and discovery through 20 % packet loss.
@testable import Discovery
import TestRandomness
import Testing

@Suite("mDNS on a simulated link")
struct SimulatedLANTests {
    static func node(host: String, address: IPAddress, instance: String? = "Ship Node", port: UInt16 = 4040, browse: Bool = false,
                     seed: UInt64) throws -> SimulatedNode {
        var responder: MDNSResponder?
        if let instance {
            var made = try makeResponder(host: host, seed: seed)
            _ = try made.register(try bigpeerService(instance, port: port), now: 0)
            responder = made
        }
        return SimulatedNode(address: address, responder: responder, browser: browse ? makeBrowser(seed: seed &+ 1000) : nil)
    }

    @Test(arguments: 1...12 as ClosedRange<UInt64>)
    func twoRespondersWithTheSameInstanceNameExactlyOneRenames(seed: UInt64) throws {
        var lan = SimulatedLAN(seed: seed)
        let first = lan.add(try Self.node(host: "node-a", address: v4(10, 0, 0, 1), seed: seed))
        // Half the runs start together (probes cross: §8.2 tie-break), half 0.6 s apart.
        if seed.isMultiple(of: 2) { lan.run(until: 600) }
        let second = lan.add(try Self.node(host: "node-b", address: v4(10, 0, 0, 2), seed: seed &+ 77))
        lan.run(until: 20_000)
        let renames = lan.nodes.flatMap(\.responderEvents).compactMap { step -> DNSName? in
            if case let .serviceRenamed(_, _, to) = step.event { to } else { nil }
        }
        #expect(renames == [try bigpeerType.prepending("Ship Node (2)")])
        let names = [first, second].compactMap { lan.nodes[$0].responder?.name(of: MDNSServiceID(value: 1)) }
        #expect(Set(names).count == 2)
        #expect(lan.nodes.allSatisfy { $0.responder?.counters.renames ?? 0 <= 1 })
    }

    @Test(arguments: 1...6 as ClosedRange<UInt64>)
    func twoHostsWithTheSameHostNameExactlyOneBecomesHost2(seed: UInt64) throws {
        var lan = SimulatedLAN(seed: seed)
        _ = lan.add(try Self.node(host: "node", address: v4(10, 0, 0, 1), instance: "Left", seed: seed))
        _ = lan.add(try Self.node(host: "node", address: v4(10, 0, 0, 2), instance: "Right", seed: seed &+ 5))
        lan.run(until: 20_000)
        let renames = lan.nodes.flatMap(\.responderEvents).compactMap { step -> DNSName? in
            if case let .hostRenamed(_, to) = step.event { to } else { nil }
        }
        #expect(renames == [name("node-2.local")])
    }

    @Test func browserFindsResponderThenGoodbyeIsLostWithinOneSecond() throws {
        var lan = SimulatedLAN(seed: 3)
        let responder = lan.add(try Self.node(host: "node-a", address: v4(10, 0, 0, 1), seed: 3))
        let browser = lan.add(try Self.node(host: "peer", address: v4(10, 0, 0, 2), instance: nil, browse: true, seed: 4))
        lan.run(until: 10_000)
        let found = lan.nodes[browser].browserEvents.compactMap { step -> DiscoveredService? in
            if case let .found(service) = step.event { service } else { nil }
        }
        #expect(found.count == 1)
        #expect(found.first?.port == 4040 && found.first?.addresses == [ifA: [v4(10, 0, 0, 1)]] && found.first?.txt["role"] == "node")
        #expect((lan.nodes[browser].browserEvents.first?.at ?? .max) < 2000)
        let goodbyeAt = lan.now
        lan.withResponder(responder) { responder, now in responder.shutdown(now: now) }
        lan.run(until: goodbyeAt + 1000)
        let lost = lan.nodes[browser].browserEvents.filter { if case .lost = $0.event { true } else { false } }
        #expect(lost.count == 1 && (lost.first?.at ?? .max) <= goodbyeAt + 1000)
    }

    @Test func eachSegmentLearnsOnlyTheAddressOfTheInterfaceFacingIt_RFC6762_6_2() throws {
        var lan = SimulatedLAN(seed: 21)
        var responder = try makeResponder(host: "node-a", seed: 21)
        _ = try responder.register(try bigpeerService(), now: 0)
        _ = lan.add(SimulatedNode(interfaces: [ifA: (0, v4(10, 0, 0, 1)), ifB: (1, v4(192, 168, 1, 1))], responder: responder, browser: nil))
        let onFirst = lan.add(try Self.node(host: "p", address: v4(10, 0, 0, 2), instance: nil, browse: true, seed: 22))
        let onSecond = lan.add(SimulatedNode(interfaces: [ifA: (1, v4(192, 168, 1, 2))], responder: nil, browser: makeBrowser(seed: 23)))
        lan.run(until: 10_000)
        #expect(lan.nodes[onFirst].browser?.services.values.map(\.addresses) == [[ifA: [v4(10, 0, 0, 1)]]])
        #expect(lan.nodes[onSecond].browser?.services.values.map(\.addresses) == [[ifA: [v4(192, 168, 1, 1)]]])
        #expect(lan.nodes[0].responder?.counters.packetsSent.keys.sorted() == [ifA, ifB])
    }

    @Test func twoInterfacesOnOneLinkHearingEachOtherAreNoConflict() throws {
        var lan = SimulatedLAN(seed: 31)
        var responder = try makeResponder(host: "node-a", seed: 31)
        _ = try responder.register(try bigpeerService(), now: 0)
        _ = lan.add(SimulatedNode(interfaces: [ifA: (0, v4(10, 0, 0, 1)), ifB: (0, v4(10, 0, 0, 5))], responder: responder, browser: nil))
        lan.run(until: 10_000)
        #expect(lan.nodes[0].responder?.counters.conflicts == 0 && lan.nodes[0].responder?.counters.renames == 0)
        #expect(lan.nodes[0].responderEvents.count == 2)
    }

    @Test func browserSeesARenamedInstanceAsAnotherService() throws {
        var lan = SimulatedLAN(seed: 9)
        _ = lan.add(try Self.node(host: "node-a", address: v4(10, 0, 0, 1), seed: 9))
        lan.run(until: 3000)
        _ = lan.add(try Self.node(host: "node-b", address: v4(10, 0, 0, 2), port: 5050, seed: 10))
        let browser = lan.add(try Self.node(host: "peer", address: v4(10, 0, 0, 3), instance: nil, browse: true, seed: 11))
        lan.run(until: 15_000)
        let services = lan.nodes[browser].browser?.services.values.map { "\($0.instanceName):\($0.port)" }.sorted()
        #expect(services == ["Ship Node (2):5050", "Ship Node:4040"])
    }

    @Test func discoveryThrough20PercentPacketLoss() throws {
        var dropped = 0
        for seed in 1...20 as ClosedRange<UInt64> {
            var lan = SimulatedLAN(seed: seed, lossPercent: 20)
            let responder = lan.add(try Self.node(host: "node-a", address: v4(10, 0, 0, 1), seed: seed))
            let browser = lan.add(try Self.node(host: "peer", address: v4(10, 0, 0, 2), instance: nil, browse: true, seed: seed &+ 9))
            lan.run(until: 60_000) { lan in lan.nodes[browser].browser?.services.isEmpty == false }
            #expect(lan.nodes[browser].browser?.services.count == 1, "seed \(seed): dropped \(lan.dropped) of \(lan.dropped + lan.delivered)")
            #expect(lan.nodes[responder].responder?.counters.renames == 0)
            dropped += lan.dropped
        }
        #expect(dropped > 10)
    }
}
