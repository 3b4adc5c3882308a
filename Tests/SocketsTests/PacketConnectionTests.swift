import BigPeerTestSupport
import Glibc
import Testing
@testable import Sockets

/// A delegate that forwards packet events to closures (tests only).
final class PacketClosureDelegate: PacketConnectionDelegate {
    var onReady: () -> Void = {}
    var onPacket: ([UInt8]) -> Void = { _ in }
    var onClose: ((any Error)?) -> Void = { _ in }
    func packetConnectionIsReady(_ c: PacketConnection) { onReady() }
    func packetConnection(_ c: PacketConnection, didReceive packet: UnsafeRawBufferPointer) { onPacket(Array(packet)) }
    func packetConnectionDidDrain(_ c: PacketConnection) {}
    func packetConnectionDidClose(_ c: PacketConnection, error: (any Error)?) { onClose(error) }
}

/// `PacketConnection` and `PacketListener` over the AF_UNIX SEQPACKET stand-in for L2CAP.
@Suite struct PacketConnectionTests {
    @Test func packetsKeepTheirBoundariesAndTheMTUHolds() async throws {
        let dir = try TemporaryDirectory()
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        let loop = group.next()
        let keep = Keeper()
        let received = MutexBox<[[UInt8]]>([])
        let closeError = MutexBox<String?>(nil)
        let address = PacketLinkAddress.unixStandIn(path: dir.path + "/l2cap")
        let options = PacketSocketOptions(standInMTU: 64)
        let refused = try await loop.submit { () throws -> Bool in
            let listener = try PacketListener(address: address, options: options, loop: loop) { fd in
                let c = PacketConnection(fd: fd, address: address, options: options, loop: loop)
                let d = PacketClosureDelegate()
                d.onPacket = { p in received.withLock { $0.append(p) } }
                d.onClose = { e in closeError.withLock { $0 = e.map { "\($0)" } ?? "orderly" } }
                c.delegate = d
                keep.objects += [c, d]
                try? c.start()
            }
            let d = PacketClosureDelegate()
            let client = try PacketConnection.connect(to: address, options: options, loop: loop, delegate: d)
            keep.objects += [listener, client, d]
            try client.send(Array(repeating: 1, count: 64))
            try client.send([2])
            try client.send(Array(repeating: 3, count: 10))
            do throws(PacketSizeError) { try client.send(Array(repeating: 4, count: 65)) } catch { return error == PacketSizeError(size: 65, mtu: 64) }
            return false
        }
        #expect(refused, "a packet above the MTU is refused on sending")
        #expect(await eventually { received.withLock { $0.count } == 3 })
        #expect(received.withLock { $0 } == [Array(repeating: 1, count: 64), [2], Array(repeating: 3, count: 10)])

        // A peer that ignores the MTU (possible only on the stand-in) ends the link on receipt.
        let raw = try await loop.submit { () throws -> Int32 in
            var pair: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
                throw IOError(call: "socketpair", errno: errno)
            }
            let c = PacketConnection(fd: pair[0], address: address, options: options, loop: loop)
            let d = PacketClosureDelegate()
            d.onClose = { e in closeError.withLock { $0 = e.map { "\($0)" } ?? "orderly" } }
            c.delegate = d
            keep.objects += [c, d]
            try c.start()
            return pair[1]
        }
        defer { close(raw) }
        closeError.withLock { $0 = nil }
        let big = [UInt8](repeating: 9, count: 65)
        #expect(big.withUnsafeBytes { send(raw, $0.baseAddress, $0.count, 0) } == 65)
        #expect(await eventually { closeError.withLock { $0 } != nil })
        #expect(closeError.withLock { $0 } == "packet of 65 bytes above the MTU 64")
    }
}
