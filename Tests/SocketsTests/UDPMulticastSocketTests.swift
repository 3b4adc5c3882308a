import BigPeerTestSupport
import Glibc
import Sockets
import Synchronization
import Testing

/// `UDPMulticastSocket` between two network namespaces made by the test (a veth pair): a datagram
/// to the mDNS group arrives with the interface it came in on and marked as sent to the group; a
/// unicast answer out of that interface arrives marked as unicast. Nothing here touches a real
/// interface.
@Suite(.serialized, .enabled(if: NetworkNamespace.canCreate, Comment(rawValue: NetworkNamespace.whyNot))) struct UDPMulticastSocketTests {
    /// An event loop whose thread lives in `ns` (sockets it makes are that namespace's).
    static func loop(in ns: NetworkNamespace) async throws -> EventLoopGroup {
        let group = try EventLoopGroup(threads: 1)
        let path = ns.path
        try await group.next().submit { try NetworkNamespaceEntry.enter(path) }
        return group
    }

    static func interfaceIndex(_ name: String, on loop: EventLoop) async throws -> Int32 {
        try await loop.submit { NetworkInterface.current().first { $0.name == name }?.index ?? 0 }
    }

    @Test(arguments: [(AF_INET, "224.0.0.251"), (AF_INET6, "ff02::fb")])
    func groupDatagramsCarryTheirInterface_andUnicastAnswersLeaveByIt(family: Int32, group: String) async throws {
        let (a, b) = (try await NetworkNamespace.create(), try await NetworkNamespace.create())
        defer { Task { await a.delete(); await b.delete() } }
        let (ea, eb) = try await NetworkNamespace.link(a, "10.61.0.1/24", b, "10.61.0.2/24")
        let (groupA, groupB) = (try await Self.loop(in: a), try await Self.loop(in: b))
        defer { groupA.shutdown(); groupB.shutdown() }
        let (loopA, loopB) = (groupA.next(), groupB.next())
        let (indexA, indexB) = (try await Self.interfaceIndex(ea, on: loopA), try await Self.interfaceIndex(eb, on: loopB))
        #expect(indexA > 0 && indexB > 0)

        let receivedA = Mutex<[UDPMulticastSocket.Datagram]>([]), receivedB = Mutex<[UDPMulticastSocket.Datagram]>([])
        let socketA = try await loopA.submit {
            let s = try UDPMulticastSocket(family: family, port: 5353, loop: loopA) { d in receivedA.withLock { $0.append(d) } }
            try s.join(group: group, interfaceIndex: indexA)
            return LoopBound(s, loop: loopA)
        }
        let socketB = try await loopB.submit {
            let s = try UDPMulticastSocket(family: family, port: 5353, loop: loopB) { d in receivedB.withLock { $0.append(d) } }
            try s.join(group: group, interfaceIndex: indexB)
            return LoopBound(s, loop: loopB)
        }
        let groupAddress = try SocketAddress(ip: group, port: 5353)
        // Multicast from A out of its veth (sent again until B has it: a join can take a moment).
        #expect(await eventually(within: .seconds(10)) {
            _ = try? await loopA.submit { socketA.value.send([1, 2, 3], to: groupAddress, interfaceIndex: indexA) }
            return receivedB.withLock { $0.contains { $0.bytes == [1, 2, 3] } }
        })
        let query = try #require(receivedB.withLock { $0.first { $0.bytes == [1, 2, 3] } })
        #expect(query.interfaceIndex == indexB && query.toGroup, "arrived on B's veth, to the group")
        #expect(query.source.port == 5353)

        // B answers A by unicast out of the interface the query came in on.
        #expect(await eventually(within: .seconds(10)) {
            _ = try? await loopB.submit { socketB.value.send([9], to: query.source, interfaceIndex: query.interfaceIndex) }
            return receivedA.withLock { $0.contains { $0.bytes == [9] } }
        })
        let answer = try #require(receivedA.withLock { $0.first { $0.bytes == [9] } })
        #expect(answer.interfaceIndex == indexA && !answer.toGroup, "a unicast answer")
        try await loopA.submit { socketA.value.close() }
        try await loopB.submit { socketB.value.close() }
    }
}
