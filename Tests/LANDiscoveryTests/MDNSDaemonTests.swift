import BigPeerTestSupport
import Discovery
import LANDiscovery
import Logging
import Sockets
import Synchronization
import Testing

/// `MDNSDaemon` on real sockets, between network namespaces the test makes (a veth pair): an
/// advertisement is found with its port and TXT, an address added to the interface is announced
/// (the browser's view updates), and a stop's goodbye makes it lost.
@Suite(.serialized, .enabled(if: NetworkNamespace.canCreate, Comment(rawValue: NetworkNamespace.whyNot))) struct MDNSDaemonTests {
    static let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    static func loop(in ns: NetworkNamespace) async throws -> EventLoopGroup {
        let group = try EventLoopGroup(threads: 1)
        let path = ns.path
        try await group.next().submit { try NetworkNamespaceEntry.enter(path) }
        return group
    }

    @Test func foundWithPortAndTXT_updatedOnANewAddress_lostOnGoodbye() async throws {
        let (a, b) = (try await NetworkNamespace.create(), try await NetworkNamespace.create())
        defer { Task { await a.delete(); await b.delete() } }
        let (ea, _) = try await NetworkNamespace.link(a, "10.62.0.1/24", b, "10.62.0.2/24")
        let (groupA, groupB) = (try await Self.loop(in: a), try await Self.loop(in: b))
        defer { groupA.shutdown(); groupB.shutdown() }

        let advertiser = try await MDNSDaemon(configuration: MDNSDaemon.Configuration(hostName: "node-a"), loop: groupA.next(), logger: Self.logger)
        let ad = LANAdvertisement(name: "Node A", port: 4040, protocolVersion: 1, peerKey: [0xAB, 0xCD], syncGroup: 3, role: .node)
        let established = Mutex<String?>(nil)
        _ = try await advertiser.advertise(try ad.service) { name in established.withLock { $0 = name } }

        let browser = try await MDNSDaemon(configuration: MDNSDaemon.Configuration(hostName: "peer-b"), loop: groupB.next(), logger: Self.logger)
        let seen = Mutex<[MDNSBrowserEvent]>([])
        try await browser.browse(try DNSName(LANAdvertisement.serviceType)) { event in seen.withLock { $0.append(event) } }
        func latest() -> DiscoveredService? {
            seen.withLock { events in
                events.reversed().lazy.compactMap { e -> DiscoveredService? in
                    switch e { case .found(let s), .updated(let s): s; case .lost: nil }
                }.first
            }
        }
        #expect(await eventually(within: .seconds(15)) { latest().flatMap { LANAdvertisement($0) } == ad })
        #expect(established.withLock { $0 } == "Node A")
        #expect(latest()?.addresses.values.flatMap { $0 }.contains(.v4(0x0A3E_0001)) == true, "10.62.0.1")

        // A second address on the advertiser's interface: re-announced, the browser sees it.
        try await a.exec(["ip", "addr", "add", "10.62.0.9/24", "dev", ea])
        #expect(await eventually(within: .seconds(20)) { latest()?.addresses.values.flatMap { $0 }.contains(.v4(0x0A3E_0009)) == true },
                "the new address was announced")

        // Stop: the goodbye makes it lost (RFC 6762 §10.1: one second after a TTL 0 record).
        await advertiser.stop()
        #expect(await eventually(within: .seconds(10)) {
            seen.withLock { $0.contains { if case .lost(let name) = $0 { name.firstLabel == "Node A" } else { false } } }
        })
        let counters = try await browser.counters()
        #expect((counters.browsers.first?.goodbyesReceived ?? 0) > 0)
        await browser.stop()
    }
}
