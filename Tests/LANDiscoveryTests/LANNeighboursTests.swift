import LANDiscovery
import Testing
import TestRandomness

/// Who dials whom (`LANLinkRule`) and what a BigPeer does as partners come, move and go
/// (`LANNeighbours`), on a manual clock.
struct LANNeighboursTests {
    static let low: [UInt8] = [0x01, 0, 0, 0, 0, 0, 0, 0x0a]
    static let high: [UInt8] = [0xf0, 0, 0, 0, 0, 0, 0, 0x01]

    static func ad(_ name: String, _ key: [UInt8], group: UInt32 = 7, version: UInt64 = 1, role: LANAdvertisement.Role = .node) -> LANAdvertisement {
        LANAdvertisement(name: name, port: 4040, protocolVersion: version, peerKey: key, syncGroup: group, role: role)
    }

    static func rule(_ key: [UInt8], role: LANAdvertisement.Role = .node) -> LANLinkRule {
        LANLinkRule(peerKey: key, syncGroup: 7, protocolVersion: 1, role: role)
    }

    // MARK: - The tie-break

    @Test func exactlyOneSideOfAPairDials_theLowerKey() {
        #expect(Self.rule(Self.low).decide(Self.ad("b", Self.high)) == .dial)
        #expect(Self.rule(Self.high).decide(Self.ad("a", Self.low)) == .accept)
        // Whatever the keys, the two sides never agree to dial both or neither.
        var rng = SeededRandom(seed: 19)
        for _ in 0..<500 {
            let a = (0..<Int.random(in: 1...9, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let b = (0..<Int.random(in: 1...9, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            guard a != b else { continue }
            #expect(Self.rule(a).shouldDial(Self.ad("b", b)) != Self.rule(b).shouldDial(Self.ad("a", a)), "\(a) \(b)")
        }
    }

    @Test func theKeysCompareAsTheirHexTextByteWise() {
        // 0x0a < 0xa0 as text "0a" < "a0"; a prefix sorts first.
        #expect(LANLinkRule.dials([0x0a], [0xa0]))
        #expect(LANLinkRule.dials([0xab], [0xab, 0x00]))
        #expect(!LANLinkRule.dials([0xab, 0x00], [0xab]))
        #expect(LANLinkRule.dials([0x09, 0xff], [0x0a, 0x00]))
    }

    @Test func ownKeyOtherGroupOtherVersionAndSmallPeersSeenByANodeAreIgnored() {
        let rule = Self.rule(Self.low)
        #expect(rule.decide(Self.ad("me (2)", Self.low)) == .ignore)
        #expect(rule.decide(Self.ad("x", Self.high, group: 8)) == .ignore)
        #expect(rule.decide(Self.ad("x", Self.high, version: 2)) == .ignore)
        #expect(rule.decide(Self.ad("x", Self.high, role: .peer)) == .ignore)
        #expect(Self.rule(Self.low, role: .peer).decide(Self.ad("x", Self.high, role: .peer)) == .dial)
    }

    @Test func aSmallPeerDialsEveryNodeOfItsGroup_whateverTheKeys() {
        #expect(Self.rule(Self.high, role: .peer).decide(Self.ad("node", Self.low, role: .node)) == .dial)
        #expect(Self.rule(Self.low, role: .peer).decide(Self.ad("node", Self.high, role: .node)) == .dial)
        #expect(Self.rule(Self.low, role: .peer).decide(Self.ad("node", Self.high, group: 8, role: .node)) == .ignore)
    }

    // MARK: - Bookkeeping

    static let url = "tcp://10.0.0.2:4040"

    @Test func aPartnerAppearsIsDialledOnce_vanishesAfterTheGrace_andComesBack() {
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(30))
        let b = Self.ad("b", Self.high)
        guard case .dial(let first)? = n.seen(b, url: Self.url, now: 0).first else { Issue.record("not dialled"); return }
        #expect(first.peerKey == "f000000000000001" && first.url == Self.url && first.dials)
        #expect(n.seen(b, url: Self.url, now: 1_000).isEmpty, "seen again: no second link")
        #expect(n.lost(name: "b", now: 2_000).isEmpty, "gone: the link stays for the grace")
        #expect(n.neighbours["f000000000000001"]?.vanishedAt == 2_000)
        #expect(n.nextWakeup == 32_000)
        #expect(n.tick(now: 31_999).isEmpty)
        #expect(n.tick(now: 32_000) == [.hangUp(peerKey: "f000000000000001")])
        #expect(n.neighbours.isEmpty && n.nextWakeup == nil)
        #expect(n.seen(b, url: Self.url, now: 40_000).count == 1, "seen again after it was hung up: dialled again")
    }

    @Test func aPartnerBackWithinTheGraceKeepsItsLink() {
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(30))
        let b = Self.ad("b", Self.high)
        _ = n.seen(b, url: Self.url, now: 0)
        _ = n.lost(name: "b", now: 1_000)
        #expect(n.seen(b, url: Self.url, now: 5_000).isEmpty)
        #expect(n.tick(now: 100_000).isEmpty, "advertised again: no hang-up")
    }

    @Test func anAddressChangeRedialsAtOnce() {
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(30))
        let b = Self.ad("b", Self.high)
        _ = n.seen(b, url: Self.url, now: 0)
        let moved = n.seen(b, url: "tcp://10.0.0.9:4040", now: 1_000)
        guard case .redial(let to)? = moved.first, moved.count == 1 else { Issue.record("\(moved)"); return }
        #expect(to.url == "tcp://10.0.0.9:4040")
    }

    @Test func theAcceptingSideListsThePartnerButNeverDials() {
        var n = LANNeighbours(rule: Self.rule(Self.high), grace: .seconds(1))
        #expect(n.seen(Self.ad("a", Self.low), url: Self.url, now: 0).isEmpty)
        #expect(n.neighbours["010000000000000a"]?.dials == false)
        #expect(n.seen(Self.ad("a", Self.low), url: "tcp://10.0.0.9:4040", now: 1).isEmpty)
        _ = n.lost(name: "a", now: 2)
        #expect(n.tick(now: 2_000).isEmpty && n.neighbours.isEmpty)
    }

    @Test func ownOtherGroupAndOtherVersionAdvertisementsMakeNoEntry() {
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(1))
        #expect(n.seen(Self.ad("me (2)", Self.low), url: Self.url, now: 0).isEmpty)
        #expect(n.seen(Self.ad("x", Self.high, group: 8), url: Self.url, now: 0).isEmpty)
        #expect(n.seen(Self.ad("y", Self.high, version: 9), url: Self.url, now: 0).isEmpty)
        #expect(n.neighbours.isEmpty)
    }

    @Test func twoAdvertisementsOfOneKeyMakeOneLink_untilTheLastGoes() {
        // Two instances of one node on one database advertise one key, as "b" and "b (2)".
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(1))
        #expect(n.seen(Self.ad("b (2)", Self.high), url: "tcp://10.0.0.3:4040", now: 0).count == 1)
        let second = n.seen(Self.ad("b", Self.high), url: Self.url, now: 1)
        #expect(second.count == 1, "the link moves to the first name's address: \(second)")
        if case .redial(let to)? = second.first { #expect(to.url == Self.url && to.name == "b") }
        let afterLoss = n.lost(name: "b", now: 2)
        if case .redial(let to)? = afterLoss.first { #expect(to.url == "tcp://10.0.0.3:4040") } else { Issue.record("\(afterLoss)") }
        #expect(n.neighbours["f000000000000001"]?.vanishedAt == nil)
        _ = n.lost(name: "b (2)", now: 3)
        #expect(n.tick(now: 1_003) == [.hangUp(peerKey: "f000000000000001")])
    }

    @Test func anAdvertisementThatLeavesTheGroupCountsAsGone() {
        var n = LANNeighbours(rule: Self.rule(Self.low), grace: .seconds(1))
        _ = n.seen(Self.ad("b", Self.high), url: Self.url, now: 0)
        #expect(n.seen(Self.ad("b", Self.high, group: 8), url: Self.url, now: 10).isEmpty)
        #expect(n.tick(now: 1_010) == [.hangUp(peerKey: "f000000000000001")])
    }
}
