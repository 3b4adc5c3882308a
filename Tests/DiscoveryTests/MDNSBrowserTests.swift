// The browser: query backoff, known answers, the cache (TTL, goodbye, cache-flush, refresh, bound),
// direct resolution of what is missing, and found/updated/lost events (RFC 6762 §5.2, §7.1, §10).
@testable import Discovery
import Testing

@Suite("mDNS browser")
struct MDNSBrowserTests {
    static let instance = (try? bigpeerType.prepending("Ship Node")) ?? .root
    static let host = name("node-1.local")
    static let ptr = DNSResourceRecord(name: bigpeerType, data: .ptr(instance), ttl: 4500)
    static let srv = DNSResourceRecord(name: instance, data: .srv(priority: 0, weight: 0, port: 4040, target: host), ttl: 120, cacheFlush: true)
    static let txt = DNSResourceRecord(name: instance, data: .txt([Array("v=1".utf8)]), ttl: 4500, cacheFlush: true)
    static let a = DNSResourceRecord(name: host, data: .a(v4(10, 0, 0, 1)), ttl: 120, cacheFlush: true)

    @Test func queriesBackOffFrom1sDoublingTo60Minutes_RFC6762_5_2() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        let done = run(&browser, until: 20_000)
        let times = done.filter { !$0.action.isEvent }.map(\.at)
        #expect((20...120).contains(times[0]))
        #expect(times.dropFirst().enumerated().allSatisfy { index, time in time - times[0] == 1000 * ((1 << (index + 1)) - 1) })
        let question = try #require(sentMessages(done.map(\.action).packets).first?.questions.first)
        #expect(question == DNSQuestion(name: bigpeerType, type: .ptr))
        var late = makeBrowser()
        late.addInterface(ifA, now: 0)
        let hours = run(&late, until: 30 * 3_600_000).map(\.at)
        let gaps = zip(hours.dropFirst(), hours).map { $0 - $1 }
        #expect(gaps.max() == 3_600_000)
    }

    @Test func anotherHostsSameQuestionStandsForOurs_RFC6762_7_3() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = run(&browser, until: 200)
        let due = try #require(browser.nextWakeup)
        let theirs = query([DNSQuestion(name: bigpeerType, type: .ptr)])
        // A QU question gets unicast answers we do not see: no stand-in.
        _ = browser.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr, unicastResponse: true)])), now: due - 300)
        // One listing a known answer we do not hold would suppress answers we need: no stand-in.
        _ = browser.receive(packet(query([DNSQuestion(name: bigpeerType, type: .ptr)], known: [Self.ptr])), now: due - 200)
        #expect(browser.nextWakeup == due)
        _ = browser.receive(packet(theirs), now: due - 100)
        #expect(browser.counters.duplicateQuestionsSuppressed == 1)
        #expect(browser.nextWakeup == due - 100 + 2000)
        #expect(browser.tick(now: due).isEmpty)
    }

    @Test func findsAServiceFromAPythonZeroconfResponse() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        let events = browser.receive(ReceivedPacket(bytes: ZeroconfFixture.response, interface: ifA, source: Endpoint(address: v4(192, 168, 7, 20), port: 5353)), now: 100).events
        guard case let .found(service)? = events.first, events.count == 1 else {
            Issue.record("expected one found event, got \(events)")
            return
        }
        #expect(service.instanceName == "Ship Node" && service.host == Self.host && service.port == 4040)
        #expect(service.txt["role"] == "node" && service.txt["v"] == "1")
        #expect(service.addresses == [ifA: [v4(192, 168, 7, 20)]])
    }

    @Test func knownAnswersListCachedPTRsWithHalfTheirTTLLeft_RFC6762_7_1() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = run(&browser, until: 200)
        _ = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a])), now: 500)
        let next = run(&browser, until: 1200)
        let message = try #require(sentMessages(next.map(\.action).packets).first)
        #expect(message.answers.count == 1)
        let known = try #require(message.answers.first)
        #expect(known.data == .ptr(Self.instance) && !known.cacheFlush && (4499...4500).contains(known.ttl))
        #expect(browser.counters.knownAnswersSent == 1)
    }

    @Test func goodbyeLosesTheServiceOneSecondLater_RFC6762_10_1() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        #expect(browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a])), now: 100).events.count == 1)
        #expect(browser.receive(packet(response([Self.ptr.with(ttl: 0)])), now: 2000).events.isEmpty)
        let events = run(&browser, until: 3000).filter(\.action.isEvent)
        #expect(events.map(\.at) == [3000])
        #expect(events.map(\.action) == [.event(.lost(Self.instance))])
        #expect(browser.counters.goodbyesReceived == 1)
    }

    @Test func cacheFlushReplacesTheSetOneSecondLater_RFC6762_10_2() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a])), now: 100)
        let moved = DNSResourceRecord(name: Self.host, data: .a(v4(10, 0, 0, 2)), ttl: 120, cacheFlush: true)
        let events = browser.receive(packet(response([moved])), now: 5000).events
        guard case let .updated(service)? = events.first else {
            Issue.record("expected updated, got \(events)")
            return
        }
        // Both addresses until the old one's second is up.
        #expect(service.addresses[ifA] == [v4(10, 0, 0, 1), v4(10, 0, 0, 2)])
        let later = run(&browser, until: 6000).compactMap { step -> DiscoveredService? in
            if case let .event(.updated(service)) = step.action { service } else { nil }
        }
        #expect(later.map { $0.addresses[ifA] } == [[v4(10, 0, 0, 2)]])
        // Records of one packet are one set: no flush among themselves.
        var fresh = makeBrowser()
        fresh.addInterface(ifA, now: 0)
        _ = fresh.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a, moved])), now: 100)
        _ = run(&fresh, until: 3000)
        #expect(fresh.services[Self.instance]?.addresses[ifA]?.count == 2)
    }

    @Test func refreshQueriesAt80_85_90_95PercentOfTTL_RFC6762_5_2() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a])), now: 0)
        let done = run(&browser, until: 121_000)
        let srvQueries = done.filter { step in
            sentMessages(step.action.browserPackets).contains { $0.questions.contains { $0.name == Self.instance && $0.type == .srv } }
        }.map(\.at).filter { $0 < 120_000 }
        #expect(srvQueries.count == 4)
        for (time, percent) in zip(srvQueries, [80, 85, 90, 95] as [Int64]) {
            #expect((120_000 * percent / 100...120_000 * (percent + 2) / 100).contains(time), "\(time) for \(percent) %")
        }
        #expect(done.last { $0.action.isEvent }?.action == .event(.lost(Self.instance)))
        #expect(browser.counters.refreshQueries >= 4)
    }

    @Test func resolvesMissingSRVTXTAndAddressesByAskingDirectly() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = run(&browser, until: 200)
        #expect(browser.receive(packet(response([Self.ptr])), now: 300).events.isEmpty)
        let ask = sentMessages(run(&browser, until: 420).map(\.action).packets).flatMap(\.questions)
        #expect(Set(ask) == [DNSQuestion(name: Self.instance, type: .srv), DNSQuestion(name: Self.instance, type: .txt)])
        #expect(browser.receive(packet(response([Self.srv, Self.txt])), now: 500).events.isEmpty)
        let askHost = sentMessages(run(&browser, until: 620).map(\.action).packets).flatMap(\.questions)
        #expect(Set(askHost) == [DNSQuestion(name: Self.host, type: .a), DNSQuestion(name: Self.host, type: .aaaa)])
        #expect(browser.receive(packet(response([Self.a])), now: 700).events.count == 1)
        #expect(browser.counters.resolveQueries == 2)
    }

    @Test func cacheIsBoundedAndIgnoresForeignRecords() throws {
        var browser = makeBrowser(cacheLimit: 5)
        browser.addInterface(ifA, now: 0)
        let ptrs = try (0..<10).map { DNSResourceRecord(name: bigpeerType, data: .ptr(try bigpeerType.prepending("n\($0)")), ttl: 4500) }
        let foreign = DNSResourceRecord(name: name("_other._tcp.local"), data: .ptr(name("x._other._tcp.local")), ttl: 4500)
        let strayA = DNSResourceRecord(name: name("stranger.local"), data: .a(v4(1, 2, 3, 4)), ttl: 120)
        _ = browser.receive(packet(response(ptrs + [foreign, strayA])), now: 100)
        #expect(browser.cachedRecordCount == 5 && browser.counters.cacheFull == 5)
        #expect(browser.counters.recordsIgnored == 2)
    }

    @Test func expiryAndInterfaceLossLoseTheService() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        browser.addInterface(ifB, now: 0)
        _ = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a])), now: 100)
        let onB = DNSResourceRecord(name: Self.host, data: .a(v4(192, 168, 1, 1)), ttl: 120, cacheFlush: true)
        let update = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, onB]), on: ifB), now: 200).events
        guard case let .updated(both)? = update.first else {
            Issue.record("expected updated, got \(update)")
            return
        }
        #expect(both.addresses == [ifA: [v4(10, 0, 0, 1)], ifB: [v4(192, 168, 1, 1)]])
        let lostA = browser.removeInterface(ifA, now: 300).events
        #expect(lostA.count == 1 && browser.services[Self.instance]?.addresses == [ifB: [v4(192, 168, 1, 1)]])
        #expect(browser.removeInterface(ifB, now: 400).events == [.lost(Self.instance)])
    }

    @Test func queriesAndForeignPortResponsesAreNotCached() throws {
        var browser = makeBrowser()
        browser.addInterface(ifA, now: 0)
        _ = browser.receive(packet(DNSMessage(header: .query(), answers: [Self.ptr, Self.srv, Self.txt, Self.a])), now: 100)
        _ = browser.receive(packet(response([Self.ptr, Self.srv, Self.txt, Self.a]), from: Endpoint(address: v4(10, 0, 0, 3), port: 53)), now: 100)
        #expect(browser.cachedRecordCount == 0)
    }
}

extension MDNSBrowserAction {
    var isEvent: Bool { if case .event = self { true } else { false } }
    var browserPackets: [OutgoingPacket] { if case let .send(packet) = self { [packet] } else { [] } }
}
