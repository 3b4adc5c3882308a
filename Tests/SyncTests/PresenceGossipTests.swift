@testable import Sync
@testable import SyncProtocol
import Testing
import Values

/// Gossip nodes joined by links, on a manual clock; messages are delivered in rounds.
struct GossipNet {
    var nodes: [PresenceGossip] = []
    /// link id (global) -> (node a, node b); each end uses the link's id as its own link id.
    var links: [UInt64: (a: Int, b: Int)] = [:]
    var now: UInt64 = 1_000
    var recordsSent = 0
    var nextLink: UInt64 = 1

    static func key(_ i: Int) -> [UInt8] { [0xAA, UInt8(i)] }

    init(count: Int, configuration: PresenceGossip.Configuration = .init()) {
        for i in 0..<count {
            nodes.append(PresenceGossip(configuration: configuration, peerKey: Self.key(i), epoch: 100, local: .init(deviceName: "node-\(i)"), now: now))
        }
    }

    @discardableResult
    mutating func link(_ a: Int, _ b: Int, _ type: LinkType = .accessPoint) -> UInt64 {
        let id = nextLink
        nextLink += 1
        links[id] = (a, b)
        nodes[a].linkUp(id, peerKey: Self.key(b), type: type, now: now)
        nodes[b].linkUp(id, peerKey: Self.key(a), type: type, now: now)
        return id
    }

    mutating func unlink(_ id: UInt64) {
        guard let l = links.removeValue(forKey: id) else { return }
        nodes[l.a].linkDown(id, now: now)
        nodes[l.b].linkDown(id, now: now)
    }

    /// Advances the clock by `millis` and delivers everything that becomes due, in rounds of the
    /// flush interval, until nothing is sent; returns the records sent.
    @discardableResult
    mutating func settle(after millis: UInt64 = 0, maxRounds: Int = 100) -> Int {
        now += millis
        var total = 0
        for _ in 0..<maxRounds {
            var sent = 0
            for i in nodes.indices {
                for m in nodes[i].tick(now: now) {
                    guard let l = links[m.link] else { continue }
                    let to = l.a == i ? l.b : l.a
                    sent += m.records.count
                    nodes[to].receive(m.records, from: m.link, now: now)
                }
            }
            total += sent
            if sent == 0 && nodes.allSatisfy({ $0.nextDeadline > now }) { break }
            now += 500
        }
        recordsSent += total
        return total
    }

    func names(seenBy i: Int) -> [String] { nodes[i].graph(now: now).remotePeers.map(\.deviceName) }
}

@Suite struct PresenceGossipTests {
    @Test func twoLinkedPeers_seeEachOther_withOneConnectionInDittoShape() throws {
        var net = GossipNet(count: 2)
        net.link(0, 1, .webSocket)
        net.settle()
        let g = net.nodes[0].graph(now: net.now)
        #expect(g.localPeer.deviceName == "node-0")
        #expect(g.remotePeers.map(\.deviceName) == ["node-1"])
        let k0 = PresenceGraph.keyString(GossipNet.key(0)), k1 = PresenceGraph.keyString(GossipNet.key(1))
        let expected = PresenceGraph.Connection(id: "\(k0)<->\(k1):WebSocket", peerKey1: k0, peerKey2: k1, type: .webSocket)
        #expect(g.localPeer.connections == [expected])
        #expect(g.remotePeers[0].connections == [expected])
        #expect(g.remotePeers[0].os == PresenceGossip.defaultOS)
        guard case .object(let json) = g.json, case .object(let local)? = json["localPeer"] else { Issue.record("shape"); return }
        for field in ["peerKey", "deviceName", "os", "sdkVersion", "isConnectedToBigPeer", "isConnectedToDittoCloud", "peerMetadata",
                      "identityServiceMetadata", "connections"] {
            #expect(local[field] != nil, "\(field)")
        }
    }

    @Test func aChain_showsFarPeers_andTheHopLimitBoundsHowFar() {
        var config = PresenceGossip.Configuration()
        config.maxHops = 3
        var net = GossipNet(count: 7, configuration: config)
        for i in 0..<6 { net.link(i, i + 1) }
        net.settle()
        // Records of nodes 1, 2, 3 reach node 0 (at most 3 links); node 3's record names node 4,
        // which is shown without details (as a peer publishing no record); nodes 5, 6 are not.
        #expect(net.names(seenBy: 0) == ["node-1", "node-2", "node-3", ""])
        #expect(net.nodes[0].graph(now: net.now).remotePeers.count == 4)
        #expect(net.nodes[3].graph(now: net.now).remotePeers.count == 6)
    }

    /// Node 0 reaches the triangle 2-3-4 through node 1: its updates enter the cycle at node 2,
    /// where without dedup they would circle until the hop limit (node 2 is not linked to the
    /// origin, so "a directly linked origin speaks for itself" does not stop them there).
    @Test func aThreeNodeCycle_sendsEachVersionOverEachLinkAtMostOnceEachWay() throws {
        var config = PresenceGossip.Configuration()
        config.refreshMillis = 1 << 40  // no refresh inside the test: every send is counted
        config.recordTTLMillis = 1 << 40
        config.maxTTLMillis = 1 << 40
        var net = GossipNet(count: 5, configuration: config)
        net.link(0, 1)
        net.link(1, 2)
        net.link(2, 3)
        net.link(3, 4)
        net.link(4, 2)
        net.settle()
        #expect(net.names(seenBy: 0) == ["node-1", "node-2", "node-3", "node-4"])
        for n in 1...50 {
            try net.nodes[0].setLocal(.init(deviceName: "node-0", metadata: ["n": .int(Int64(n))]), now: net.now)
            let sent = net.settle(after: 500)
            // 0 to 1, 1 to 2, 2 to 3 and 4, 3 and 4 once to each other (duplicates there): 6.
            #expect(sent <= 6, "update \(n): \(sent) records sent")
        }
        // Quiet: nothing more is sent until the refresh.
        #expect(net.settle(after: 1_000) == 0)
        #expect(net.nodes[4].graph(now: net.now).peer(PresenceGraph.keyString(GossipNet.key(0)))?.metadata == ["n": 50])
    }

    @Test func duplicatesAndOlderVersions_areDroppedAndNotForwarded() {
        var net = GossipNet(count: 3)
        let ab = net.link(0, 1)
        net.link(1, 2)
        net.settle()
        guard var record = net.nodes[0].records[GossipNet.key(2)]?.record else { Issue.record("no record of node 2"); return }
        let before = net.nodes[0].statistics
        net.nodes[0].receive([record], from: ab, now: net.now)  // the version node 0 already has
        record.seq -= 1
        net.nodes[0].receive([record], from: ab, now: net.now)  // an older one
        #expect(net.nodes[0].statistics.duplicates == before.duplicates + 2)
        #expect(net.nodes[0].statistics.accepted == before.accepted)
        #expect(net.settle(after: 500) == 0)
    }

    @Test func aPeerThatLeaves_disappearsAtOnce_andItsRecordExpires() {
        var net = GossipNet(count: 3)
        net.link(0, 1)
        let bc = net.link(1, 2)
        net.settle()
        #expect(net.names(seenBy: 0) == ["node-1", "node-2"])
        net.unlink(bc)
        net.settle()
        #expect(net.names(seenBy: 0) == ["node-1"])
        #expect(net.nodes[0].records[GossipNet.key(2)] != nil)  // kept until its ttl runs out
        net.settle(after: net.nodes[0].configuration.recordTTLMillis)
        #expect(net.nodes[0].records[GossipNet.key(2)] == nil)
        #expect(net.nodes[0].records[GossipNet.key(1)] != nil)  // refreshed every 20 s
    }

    @Test func aRestartedOrigin_withAnOlderEpoch_isBelievedFromItsOwnLink() {
        var net = GossipNet(count: 2)
        let link = net.link(0, 1)
        net.settle()
        var restarted = PresenceGossip(peerKey: GossipNet.key(1), epoch: 50, local: .init(deviceName: "renamed"), now: net.now)
        restarted.linkUp(link, peerKey: GossipNet.key(0), type: .accessPoint, now: net.now)
        net.nodes[1] = restarted
        net.settle()
        #expect(net.names(seenBy: 0) == ["renamed"])
    }

    @Test func receivedRecords_areBoundedPerLinkAndInTotal() {
        var config = PresenceGossip.Configuration()
        config.maxRecords = 100
        config.receiveBurst = 300
        config.receiveRecordsPerSecond = 10
        var g = PresenceGossip(configuration: config, peerKey: [1], epoch: 1, local: .init(deviceName: "me"), now: 0)
        g.linkUp(7, peerKey: [2], type: .webSocket, now: 0)
        let fakes = (0..<1000).map { PresenceRecord(peerKey: [3, UInt8($0 & 0xFF), UInt8($0 >> 8)], epoch: 1, seq: 1, ttlMillis: 60_000, deviceName: "x") }
        g.receive(fakes, from: 7, now: 0)
        #expect(g.records.count == 100)
        #expect(g.statistics.droppedFull == 200)
        #expect(g.statistics.droppedRate == 700)
        // One origin flooding updates: each costs a token; the change list stays compact.
        var f = PresenceGossip(configuration: config, peerKey: [1], epoch: 1, local: .init(deviceName: "me"), now: 0)
        f.linkUp(7, peerKey: [2], type: .webSocket, now: 0)
        var flood = PresenceRecord(peerKey: [2], epoch: 1, seq: 1, ttlMillis: 60_000, deviceName: "flooder")
        func send(_ n: Int, at now: UInt64) -> Int {
            let before = f.statistics.accepted
            for _ in 0..<n {
                flood.seq += 1
                f.receive([flood], from: 7, now: now)
            }
            return f.statistics.accepted - before
        }
        #expect(send(1000, at: 0) == 300)  // the burst
        #expect(send(1000, at: 10_000) == 100)  // 10 s at 10 records/s
        #expect(f.changes.count <= 2 * (f.records.count + 1) + 64)
    }

    @Test func floodedUpdates_areCoalescedToTheNewestVersionPerFlush() {
        var net = GossipNet(count: 3)
        net.link(0, 1)
        net.link(1, 2)
        net.settle()
        let before = net.nodes[2].statistics.accepted
        for n in 0..<200 { try? net.nodes[0].setLocal(.init(deviceName: "n\(n)"), now: net.now) }
        net.settle(after: 500)
        #expect(net.nodes[2].statistics.accepted - before == 1)
        #expect(net.names(seenBy: 2) == ["n199", "node-1"])
    }

    @Test func localMetadata_isBounded() {
        var g = PresenceGossip(peerKey: [1], epoch: 1, local: .init(deviceName: "me"), now: 0)
        let big: [String: Value] = ["blob": .string(String(repeating: "x", count: 5000))]
        #expect(throws: PresenceGossip.Failure.self) { try g.setLocal(.init(deviceName: "me", metadata: big), now: 1) }
    }

    @Test func presenceMessages_roundTrip_andOutOfRangeFieldsAreViolations() throws {
        let r = PresenceRecord(peerKey: [1, 2], epoch: 9, seq: 3, hops: 2, ttlMillis: 1000, deviceName: "d", os: "Linux", sdkVersion: "s",
                               isConnectedToBigPeer: true, metadata: ["a": 1], identityMetadata: ["b": "c"],
                               links: [PresenceLink(peerKey: [3], type: .bluetooth)])
        let bytes = SyncMessage.presence([r]).encode()
        #expect(try SyncMessageDecoder.decode(bytes) == .presence([r]))
        #expect(r.encodedSize == bytes.count - 1 - 2 - 9 - 5 - 1)  // map head, "t", "presence", "recs", array head
        var tooFar = r
        tooFar.hops = 17
        #expect(throws: SyncProtocolError.self) { try SyncMessageDecoder.decode(SyncMessage.presence([tooFar]).encode()) }
        var fat = r
        fat.metadata = ["blob": .string(String(repeating: "x", count: 4100))]
        #expect(throws: SyncProtocolError.self) { try SyncMessageDecoder.decode(SyncMessage.presence([fat]).encode()) }
        #expect(throws: SyncProtocolError.self) { try SyncMessageDecoder.decode(SyncMessage.presence(Array(repeating: r, count: 65)).encode()) }
        var noTTL = r
        noTTL.ttlMillis = 0
        #expect(throws: SyncProtocolError.self) { try SyncMessageDecoder.decode(SyncMessage.presence([noTTL]).encode()) }
    }
}

/// The server session's part (PROTOCOL.md §4.14): received presence goes to the driver, presence
/// to send goes out only once ready, and neither costs or waits for credit.
@Suite struct SyncSessionPresenceTests {
    static let record = PresenceRecord(peerKey: [1], epoch: 1, seq: 1, ttlMillis: 60_000, deviceName: "d")

    @Test func presence_isHandedToTheDriver_andSentWithoutCredit_onlyWhenReady() {
        var h = SessionHarness()
        #expect(h.feed(.sendPresence([Self.record])).isEmpty, "nothing before the handshake")
        _ = h.receive(.hello(SessionHarness.hello()))
        _ = h.receive(.presence([Self.record]))  // pipelined behind hello: held with the others
        let welcomed = h.feed(.authenticated(.accept(.everything)))
        #expect(welcomed.contains(.presenceReceived([Self.record])))
        let credit = h.session.credit
        let out = h.feed(.sendPresence([Self.record]))
        #expect(sent(out) == [.presence([Self.record])])
        #expect(h.session.credit == credit, "control traffic: no credit spent")
        var empty = SessionHarness.ready(credit: 65536)
        empty.session.credit = 0
        #expect(sent(empty.feed(.sendPresence([Self.record]))) == [.presence([Self.record])], "nor waits for it")
    }
}

extension PresenceGossipTests {
    /// A server with 300 peers: its record lists 256 links and still fits the smallest message a
    /// peer must accept; its own graph shows all 300.
    @Test func aRecordListsAtMost256Links_andFitsTheSmallestMessage() throws {
        var g = PresenceGossip(peerKey: [0], epoch: 1, local: .init(deviceName: "server", metadata: ["m": .string(String(repeating: "x", count: 4000))]), now: 0)
        for i in 1...300 { g.linkUp(UInt64(i), peerKey: [1, UInt8(i & 0xFF), UInt8(i >> 8)], type: .webSocket, now: 0) }
        let sent = g.tick(now: 0)
        let own = try #require(sent.first { $0.link == 1 }?.records.first { $0.peerKey == [0] })
        #expect(own.links.count == 256)
        let bytes = SyncMessage.presence([own]).encode()
        #expect(bytes.count <= 60 << 10)
        var peerLimits = SyncLimits.default
        peerLimits.maxMessageSize = 64 << 10
        #expect(try SyncMessageDecoder.decode(bytes, limits: peerLimits) == .presence([own]))
        #expect(g.graph(now: 0).remotePeers.count == 300)
    }
}

extension PresenceGossipTests {
    /// A server that a fleet connects to at once: each new peer gets the records at once, but the
    /// server's own record (its link list) is not re-sent to everyone for every peer that joins.
    @Test func aFleetConnectingAtOnce_costsSendsLinearInItsSize() throws {
        var g = PresenceGossip(peerKey: [0], epoch: 1, local: .init(deviceName: "server"), now: 0)
        var ownSends = 0, newLinksServed = Set<UInt64>()
        var now: UInt64 = 0
        for i in 1...400 {
            now += 5  // 200 peers a second, each link ticked as the hub does after a link comes up
            g.linkUp(UInt64(i), peerKey: [1, UInt8(i & 0xFF), UInt8(i >> 8)], type: .webSocket, now: now)
            for m in g.tick(now: now) {
                ownSends += m.records.filter { $0.peerKey == [0] }.count
                if m.link == UInt64(i) { newLinksServed.insert(m.link) }
            }
        }
        #expect(newLinksServed.count == 400, "every new link got the server's record at once")
        #expect(ownSends < 3 * 400, "\(ownSends) sends of the server's record: one per new link and a few rounds, not one per link per join")
        // Within `linkChangeMillis` every link hears the link list as it is now.
        var heard: [UInt64: Int] = [:]
        for m in g.tick(now: now + 5_000) {
            for r in m.records where r.peerKey == [0] { heard[m.link] = r.links.count }
        }
        #expect(heard.count == 400 && heard.values.allSatisfy { $0 == 256 })
    }

    /// The server's own record (up to 256 links, ~24 KB) is encoded once per flush: every link's
    /// copy carries the same bytes (one buffer), which encode exactly as the record itself does.
    /// Before, it was encoded once per link for its size under the hub's lock, and again by
    /// every session to send it.
    @Test func theOwnRecord_isEncodedOncePerFlush_forEveryLink() throws {
        var g = PresenceGossip(peerKey: [0], epoch: 1, local: .init(deviceName: "server"), now: 0)
        for i in 1...300 { g.linkUp(UInt64(i), peerKey: [1, UInt8(i & 0xFF), UInt8(i >> 8)], type: .webSocket, now: 0) }
        let own = g.tick(now: 6_000).compactMap { $0.records.first { $0.peerKey == [0] } }
        #expect(own.count == 300)
        let buffers = Set(own.map { r in r.encoding.bytes?.withUnsafeBufferPointer { Int(bitPattern: $0.baseAddress) } ?? 0 })
        #expect(buffers.count == 1 && !buffers.contains(0), "\(buffers.count) encodings for 300 links")
        var plain = own[0]
        plain.encoding = .init()
        #expect(SyncMessage.presence([own[0]]).encode() == SyncMessage.presence([plain]).encode())
        #expect(own[0].encodedSize == plain.encodedSize)
    }

    /// With few links (a small peer), a link change goes out with the next flush, as before.
    @Test func aPeerWithFewLinks_publishesLinkChangesPromptly() {
        var g = PresenceGossip(peerKey: [0], epoch: 1, local: .init(deviceName: "tablet"), now: 0)
        g.linkUp(1, peerKey: [1], type: .accessPoint, now: 0)
        _ = g.tick(now: 0)
        g.linkUp(2, peerKey: [2], type: .bluetooth, now: 10)
        _ = g.tick(now: 10)  // the new link is served
        let toFirst = g.tick(now: 500).first { $0.link == 1 }?.records.first { $0.peerKey == [0] }
        #expect(toFirst?.links.count == 2)
    }
}
