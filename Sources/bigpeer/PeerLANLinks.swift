import CRDT
import Discovery
import Glibc
import LANDiscovery
import Logging
import SmallPeer
import Sockets
import SyncProtocol

/// `bigpeer peer --lan --listen` (docs/LOCAL-NODE.md, "Small peers with each other"): the peer
/// advertises itself (`role=peer`, its key, its sync group, the port it accepts links on) and
/// links with the other small peers of its group it finds, one link per pair by the rule local
/// nodes use (`LANLinks`, `LANLinkRule`): it dials the peers with a higher key (a `SyncClient`
/// to `tcp://ADDRESS:PORT`) and accepts the others' links on `--listen-port`.
///
/// **Threading.** The listener and the mDNS daemon run on one loop of their own; the links
/// (`SyncClient`s) on theirs.
final class PeerLANLinks: Sendable {
    let port: Int
    private let group: EventLoopGroup
    private let listener: LoopBound<TCPListener>
    private let daemon: MDNSDaemon
    private let links: LANLinks<SyncClient>

    private init(port: Int, group: EventLoopGroup, listener: LoopBound<TCPListener>, daemon: MDNSDaemon, links: LANLinks<SyncClient>) {
        self.port = port
        self.group = group
        self.listener = listener
        self.daemon = daemon
        self.links = links
    }

    /// Listens on `listenPort` (0: any), advertises, browses and links. `client` is the
    /// configuration each dialled link starts from (credentials, device name); its URL is replaced.
    static func start(peer: SmallPeer, client: SyncClient.Configuration, syncGroup: UInt32, interfaces: [String], listenPort: Int,
                      logger: Logger) async throws -> PeerLANLinks {
        let group = try EventLoopGroup(threads: 1)
        let loop = group.next()
        let listener: LoopBound<TCPListener>
        let daemon: MDNSDaemon
        do {
            let address = try SocketAddress(ip: "::", port: listenPort)
            listener = try await loop.submit { () throws -> LoopBound<TCPListener> in
                LoopBound(try TCPListener(address: address, loop: loop) { fd, remote in
                    logger.notice("LAN peer link accepted", metadata: ["from": "\(remote)"])
                    PeerLinkServing.serve(fd: fd, remote: remote, loop: loop, peer: peer, logger: logger)
                }, loop: loop)
            }
            var configuration = MDNSDaemon.Configuration(hostName: "bigpeer-peer-\(UInt32.random(in: 0...UInt32.max))")
            configuration.interfaces = interfaces
            daemon = try await MDNSDaemon(configuration: configuration, loop: loop, logger: logger)
        } catch {
            group.shutdown()
            throw error
        }
        let port = try await loop.submit { listener.value.localAddress.port }
        let peerKey = LANAdvertisement.siteKey(peer.siteID.rawValue)
        let rule = LANLinkRule(peerKey: peerKey, syncGroup: syncGroup, protocolVersion: SyncProtocol.version, role: .peer)
        let links = LANLinks<SyncClient>(rule: rule, grace: .seconds(30), dial: { neighbour in
            var configuration = client
            configuration.url = neighbour.url
            configuration.reconnectMax = .seconds(10)
            do {
                let link = try SyncClient(peer: peer, configuration: configuration)
                logger.notice("linking with a LAN peer", metadata: ["peer": "\(neighbour.peerKey)", "name": "\(neighbour.name)", "url": "\(neighbour.url)"])
                return link
            } catch {
                logger.error("cannot link with a LAN peer", metadata: ["peer": "\(neighbour.peerKey)", "url": "\(neighbour.url)", "error": "\(error)"])
                return nil
            }
        }, hangUp: { link in await link.stop() })
        let advertisement = LANAdvertisement(name: client.deviceName, port: UInt16(truncatingIfNeeded: port), protocolVersion: SyncProtocol.version,
                                             peerKey: peerKey, syncGroup: syncGroup, role: .peer)
        do {
            _ = try await daemon.advertise(try advertisement.service) { name in
                logger.notice("advertised on the LAN", metadata: ["name": "\(name)", "port": "\(port)"])
            }
            try await links.browse(on: daemon)
        } catch {
            await links.stop()
            await daemon.stop()
            group.shutdown()
            throw error
        }
        return PeerLANLinks(port: port, group: group, listener: listener, daemon: daemon, links: links)
    }

    /// Goodbyes, the links end, the listener closes.
    func stop() async {
        await daemon.stop()
        await links.stop()
        let listener = self.listener
        try? await listener.loop.submit { listener.value.close() }
        group.shutdown()
    }
}

/// Where a link another small peer dialled is served: the one call site that hands an accepted
/// connection to the SmallPeer (the sync protocol with the stream framing of PROTOCOL.md §2, the
/// peer serving as a `SyncSession` serves at a node). Runs on `loop`, the listener's.
enum PeerLinkServing {
    static let unavailable = "serving links needs SmallPeer's serving API (a SmallPeer that serves an accepted framed stream); this build only dials"

    static func serve(fd: Int32, remote: SocketAddress, loop: EventLoop, peer: SmallPeer, logger: Logger) {
        logger.error("\(unavailable): link closed", metadata: ["from": "\(remote)"])
        Glibc.close(fd)
    }
}
