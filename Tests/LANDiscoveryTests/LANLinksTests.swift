import BigPeerTestSupport
import LANDiscovery
import Testing

/// `LANLinks` runs `LANNeighbours`' decisions in order: one link per partner, the old link ended
/// before the new one starts on a redial, every link ended on `stop`.
struct LANLinksTests {
    /// What the handlers were asked, in order.
    final class Calls: Sendable {
        let log = MutexBox<[String]>([])
        var all: [String] { log.withLock { $0 } }
        func add(_ call: String) { log.withLock { $0.append(call) } }
    }

    static func links(_ calls: Calls, grace: Duration) -> LANLinks<String> {
        LANLinks<String>(rule: LANLinkRule(peerKey: [0x01], syncGroup: 7, protocolVersion: 1, role: .node), grace: grace,
                         tickInterval: .milliseconds(10),
                         dial: { neighbour in calls.add("dial \(neighbour.url)"); return neighbour.url },
                         hangUp: { url in calls.add("hang up \(url)") })
    }

    static func ad(_ name: String, _ key: [UInt8]) -> LANAdvertisement {
        LANAdvertisement(name: name, port: 4040, protocolVersion: 1, peerKey: key, syncGroup: 7, role: .node)
    }

    @Test func dialsOnce_redialsInOrder_andHangsUpEverythingOnStop() async throws {
        let calls = Calls()
        let links = Self.links(calls, grace: .seconds(3600))
        links.seen(Self.ad("b", [0x02]), url: "tcp://b1")
        links.seen(Self.ad("b", [0x02]), url: "tcp://b1")
        links.seen(Self.ad("a", [0x00]), url: "tcp://a")  // a lower key: it dials us
        links.seen(Self.ad("b", [0x02]), url: "tcp://b2")
        links.seen(Self.ad("c", [0x03]), url: "tcp://c")
        #expect(await eventually(within: .seconds(10)) { calls.all.count == 4 })
        #expect(calls.all == ["dial tcp://b1", "hang up tcp://b1", "dial tcp://b2", "dial tcp://c"])
        #expect(links.links.sorted() == ["tcp://b2", "tcp://c"])
        #expect(links.partners.map(\.neighbour.peerKey) == ["00", "02", "03"] && links.partners.map(\.link) == [nil, "tcp://b2", "tcp://c"])
        await links.stop()
        #expect(Set(calls.all.suffix(2)) == ["hang up tcp://b2", "hang up tcp://c"] && calls.all.count == 6)
        links.seen(Self.ad("d", [0x04]), url: "tcp://d")
        #expect(calls.all.count == 6, "nothing is dialled after stop")
    }

    @Test func aVanishedPartnerIsHungUpAfterTheGrace() async throws {
        let calls = Calls()
        let links = Self.links(calls, grace: .milliseconds(50))
        links.seen(Self.ad("b", [0x02]), url: "tcp://b")
        #expect(await eventually(within: .seconds(10)) { links.links == ["tcp://b"] })
        links.lost(name: "b")
        #expect(await eventually(within: .seconds(10)) { calls.all == ["dial tcp://b", "hang up tcp://b"] && links.partners.isEmpty })
        await links.stop()
    }
}
