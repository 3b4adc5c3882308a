// The responder's probing, announcing, conflicts, renames and goodbyes (RFC 6762 §8, §9, §10.1),
// on a manual clock.
@testable import Discovery
import Testing

@Suite("mDNS responder: probing, announcing, conflicts")
struct MDNSResponderProbingTests {
    static let instance = (try? bigpeerType.prepending("Ship Node")) ?? .root

    @Test func probesThreeTimes250msApartFirstQU_RFC6762_8_1() throws {
        var responder = try makeResponder()
        _ = try responder.register(try bigpeerService(), now: 0)
        #expect(responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0).isEmpty)
        let done = run(&responder, until: 3000)
        let probes = done.filter { step in
            sentMessages(step.action.packetList).contains { !$0.header.isResponse && $0.questions.contains { $0.name == Self.instance } }
        }
        #expect(probes.count == 3)
        let times = probes.map(\.at)
        #expect((0...250).contains(times[0]))
        #expect(times[1] - times[0] == 250 && times[2] - times[1] == 250)
        let messages = probes.flatMap { sentMessages($0.action.packetList) }
        let questions = messages.flatMap(\.questions).filter { $0.name == Self.instance }
        #expect(questions.map(\.unicastResponse) == [true, false, false])
        #expect(questions.allSatisfy { $0.type == .any })
        let proposed = messages[0].authorities.filter { $0.name == Self.instance }
        #expect(Set(proposed.map(\.type)) == [.srv, .txt])
        #expect(responder.counters.probesSent >= 3)
    }

    @Test func announcesTwice1sApartWithCacheFlushOnUniqueRecords_RFC6762_8_3() throws {
        var responder = try makeResponder()
        let id = try responder.register(try bigpeerService(), now: 0)
        _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
        let done = run(&responder, until: 10_000)
        let lastProbe = try #require(done.last { step in sentMessages(step.action.packetList).contains { $0.questions.contains { $0.name == Self.instance } } }?.at)
        let announcements = done.filter { step in
            sentMessages(step.action.packetList).contains { $0.header.isResponse && $0.answers.contains { $0.name == Self.instance } }
        }
        #expect(announcements.map(\.at) == [lastProbe + 250, lastProbe + 1250])
        // The host's first announcement may share the packet: look at the service's records.
        let records = try #require(sentMessages(announcements[0].action.packetList).first).answers.filter { $0.name == Self.instance || $0.type == .ptr }
        for record in records {
            #expect(record.cacheFlush == (record.type != .ptr), "\(record.type)")
        }
        #expect(Set(records.map(\.type)) == [.ptr, .srv, .txt])
        #expect(done.map(\.action).events.contains(.serviceEstablished(id, Self.instance)))
        #expect(done.map(\.action).events.contains(.hostNameEstablished(name("node-1.local"))))
        #expect(run(&responder, until: 100_000).isEmpty)
        #expect(responder.counters.packetsSent == [ifA: done.map(\.action).packets.count])
        #expect(responder.counters.announcementsSent == announcements.count)
    }

    @Test func conflictingResponseWhileProbingRenames_RFC6762_9() throws {
        var responder = try makeResponder()
        let id = try responder.register(try bigpeerService(), now: 0)
        _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
        _ = run(&responder, until: 300)
        let other = DNSMessage(header: .response(), answers: [
            DNSResourceRecord(name: Self.instance, data: .srv(priority: 0, weight: 0, port: 9, target: name("elsewhere.local")), ttl: 120, cacheFlush: true),
        ])
        let actions = responder.receive(packet(other), now: 310)
        let renamed = try bigpeerType.prepending("Ship Node (2)")
        #expect(actions.events == [.serviceRenamed(id, from: Self.instance, to: renamed)])
        #expect(responder.name(of: id) == renamed)
        #expect(responder.counters.renames == 1 && responder.counters.conflicts == 1)
        let done = run(&responder, until: 5000)
        #expect(done.map(\.action).events.contains(.serviceEstablished(id, renamed)))
    }

    @Test func ownLoopedBackAnnouncementIsNoConflict() throws {
        var (responder, id) = try establishedResponder()
        // Our own announcement, heard back through multicast loopback.
        let announcement = DNSMessage(header: .response(), answers: responder.records(of: .service(id), on: ifA))
        #expect(responder.receive(packet(announcement), now: 5001).events.isEmpty)
        #expect(responder.counters.conflicts == 0)
    }

    @Test func establishedNameMeetingConflictProbesAgainThenRenames_RFC6762_9() throws {
        var (responder, id) = try establishedResponder()
        let other = DNSMessage(header: .response(), answers: [
            DNSResourceRecord(name: Self.instance, data: .txt([Array("x=y".utf8)]), ttl: 4500, cacheFlush: true),
        ])
        #expect(responder.receive(packet(other), now: 5000).isEmpty)
        #expect(responder.counters.conflicts == 1 && responder.counters.renames == 0)
        // Probing again; the other host answers the probe: now it is a rename.
        _ = run(&responder, until: 5300)
        let actions = responder.receive(packet(other), now: 5301)
        #expect(actions.events == [.serviceRenamed(id, from: Self.instance, to: try bigpeerType.prepending("Ship Node (2)"))])
        // The announced name got its goodbyes; nothing about it is kept.
        let goodbyes = sentMessages(actions.packets).flatMap(\.answers)
        #expect(!goodbyes.isEmpty && goodbyes.allSatisfy { $0.ttl == 0 && ($0.name == Self.instance || $0.data == .ptr(Self.instance)) })
        #expect(!responder.lastMulticast.values.flatMap(\.keys).contains { $0.name == Self.instance || $0.data == .ptr(Self.instance) })
    }

    @Test func simultaneousProbeTieBreakLoserWaitsOneSecond_RFC6762_8_2() throws {
        var responder = try makeResponder()
        _ = try responder.register(try bigpeerService(port: 4040), now: 0)
        _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
        _ = run(&responder, until: 300)
        func probe(port: UInt16) -> DNSMessage {
            DNSMessage(header: .query(), questions: [DNSQuestion(name: Self.instance, type: .any)], authorities: [
                DNSResourceRecord(name: Self.instance, data: .srv(priority: 0, weight: 0, port: port, target: name("node-1.local")), ttl: 120),
                DNSResourceRecord(name: Self.instance, data: .txt([Array("v=1".utf8), Array("role=node".utf8)]), ttl: 4500),
            ])
        }
        // Their port is lower: their data sorts first, we win and ignore them.
        _ = responder.receive(packet(probe(port: 80)), now: 310)
        #expect(responder.counters.probeTiebreaksLost == 0)
        // Their port is higher: we lose, and probe again from the first probe one second later.
        _ = responder.receive(packet(probe(port: 9000)), now: 320)
        #expect(responder.counters.probeTiebreaksLost == 1)
        let done = run(&responder, until: 1319)
        #expect(!done.contains { step in sentMessages(step.action.packetList).contains { $0.questions.contains { $0.name == Self.instance } } })
        let next = run(&responder, until: 1320)
        let question = sentMessages(next.map(\.action).packets).flatMap(\.questions).first { $0.name == Self.instance }
        #expect(question?.unicastResponse == true)
    }

    @Test func tieBreakOrderComparesClassTypeThenRdata_RFC6762_8_2() {
        let a = DNSResourceRecord(name: name("h.local"), data: .a(v4(10, 0, 0, 1)), ttl: 120)
        let b = DNSResourceRecord(name: name("h.local"), data: .a(v4(10, 0, 0, 2)), ttl: 120)
        let aaaa = DNSResourceRecord(name: name("h.local"), data: .aaaa(.v6(high: 0, low: 1)), ttl: 120)
        #expect(MDNSResponder.tieBreakOrder([a], [b]) == -1)
        #expect(MDNSResponder.tieBreakOrder([b], [a]) == 1)
        #expect(MDNSResponder.tieBreakOrder([a], [a.with(ttl: 1)]) == 0)
        #expect(MDNSResponder.tieBreakOrder([aaaa], [b]) == 1)
        #expect(MDNSResponder.tieBreakOrder([a], [a, b]) == -1)
    }

    @Test func registrationRefusesBadAndDuplicateNames() throws {
        var responder = try makeResponder()
        #expect(throws: MDNSResponderError.badInstanceName("")) { try responder.register(try bigpeerService(""), now: 0) }
        let long = String(repeating: "x", count: 64)
        #expect(throws: MDNSResponderError.badInstanceName(long)) { try responder.register(try bigpeerService(long), now: 0) }
        _ = try responder.register(try bigpeerService("Ship Node"), now: 0)
        #expect(throws: MDNSResponderError.duplicateInstanceName(Self.instance)) { try responder.register(try bigpeerService("ship node"), now: 0) }
        #expect(throws: MDNSResponderError.badHostName("")) { try makeResponder(host: "") }
    }

    @Test func renamingRules() {
        #expect(MDNSResponder.nextInstanceName(after: "Ship Node") == "Ship Node (2)")
        #expect(MDNSResponder.nextInstanceName(after: "Ship Node (2)") == "Ship Node (3)")
        #expect(MDNSResponder.nextInstanceName(after: "Ship Node (9)") == "Ship Node (10)")
        #expect(MDNSResponder.nextInstanceName(after: "(2)") == "(2) (2)")
        #expect(MDNSResponder.nextHostName(after: "node") == "node-2")
        #expect(MDNSResponder.nextHostName(after: "node-2") == "node-3")
        #expect(MDNSResponder.nextHostName(after: "node-1") == "node-1-2")
        let long = String(repeating: "é", count: 31) + "x"
        let renamed = MDNSResponder.nextInstanceName(after: long)
        #expect(renamed.utf8.count <= 63 && renamed.hasSuffix(" (2)"))
    }

    @Test func hostConflictRenamesHostAndReannouncesServices() throws {
        var responder = try makeResponder()
        _ = try responder.register(try bigpeerService(), now: 0)
        _ = responder.setInterface(ifA, addresses: [v4(10, 0, 0, 1)], now: 0)
        _ = run(&responder, until: 300)
        let other = DNSMessage(header: .response(), answers: [DNSResourceRecord(name: name("node-1.local"), data: .a(v4(10, 0, 0, 7)), ttl: 120, cacheFlush: true)])
        let events = responder.receive(packet(other), now: 301).events
        #expect(events == [.hostRenamed(from: name("node-1.local"), to: name("node-1-2.local"))])
        let done = run(&responder, until: 5000)
        let srvTargets = sentMessages(done.map(\.action).packets).flatMap(\.answers).compactMap { record -> DNSName? in
            if case let .srv(_, _, _, target) = record.data { target } else { nil }
        }
        #expect(!srvTargets.isEmpty && srvTargets.allSatisfy { $0 == name("node-1-2.local") })
    }

    @Test func goodbyesOnUnregisterShutdownAndInterfaceLoss_RFC6762_10_1() throws {
        var (responder, id) = try establishedResponder()
        let unregister = sentMessages(responder.unregister(id, now: 5000).packets)
        #expect(unregister.count == 1)
        #expect(Set(unregister[0].answers.map(\.type)) == [.ptr, .srv, .txt] && unregister[0].answers.allSatisfy { $0.ttl == 0 })
        #expect(responder.counters.goodbyeRecordsSent == 4)

        var (second, _) = try establishedResponder()
        let shutdown = sentMessages(second.shutdown(now: 5000).packets)
        #expect(Set(shutdown.flatMap(\.answers).map(\.type)) == [.a, .aaaa, .ptr, .srv, .txt] && shutdown.flatMap(\.answers).allSatisfy { $0.ttl == 0 })
        #expect(second.tick(now: 6000).isEmpty && second.nextWakeup == nil)

        var (third, _) = try establishedResponder()
        let removed = third.removeInterface(ifA, now: 5000).packets
        #expect(!removed.isEmpty && removed.allSatisfy { $0.interface == ifA })
        #expect(sentMessages(removed).flatMap(\.answers).allSatisfy { $0.ttl == 0 })
        #expect(third.nextWakeup == nil)
    }

    @Test func addressChangeSaysGoodbyeToOldAddressReprobesAndReannounces_RFC6762_8_4() throws {
        var (responder, id) = try establishedResponder(addresses: [v4(10, 0, 0, 1)])
        let change = sentMessages(responder.setInterface(ifA, addresses: [v4(10, 0, 0, 2)], now: 5000).packets)
        #expect(change.flatMap(\.answers) == [DNSResourceRecord(name: name("node-1.local"), data: .a(v4(10, 0, 0, 1)), ttl: 0, cacheFlush: true)])
        let done = sentMessages(run(&responder, until: 10_000).map(\.action).packets)
        #expect(done.contains { !$0.header.isResponse && $0.authorities.contains { $0.data == .a(v4(10, 0, 0, 2)) } })
        #expect(done.contains { $0.header.isResponse && $0.answers.contains { $0.name == responder.name(of: id) && $0.type == .srv } })
        #expect(done.filter(\.header.isResponse).flatMap { $0.answers + $0.additionals }.allSatisfy { $0.data != .a(v4(10, 0, 0, 1)) })
    }
}

extension MDNSResponderAction {
    var packetList: [OutgoingPacket] { if case let .send(packet) = self { [packet] } else { [] } }
}
