import ConnectionPolicy
import CRDT
import Discovery
import Glibc
import LANDiscovery
import Logging
import SmallPeer
import Sockets
import Sync
import Synchronization
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
    private let served: LoopBound<ServedPeerLinks>

    private init(port: Int, group: EventLoopGroup, listener: LoopBound<TCPListener>, daemon: MDNSDaemon, links: LANLinks<SyncClient>,
                 served: LoopBound<ServedPeerLinks>) {
        self.port = port
        self.group = group
        self.listener = listener
        self.daemon = daemon
        self.links = links
        self.served = served
    }

    /// Listens on `listenPort` (0: any), advertises, browses and links. `client` is the
    /// configuration each dialled link starts from (credentials, device name); its URL is replaced.
    /// `policy` decides which peers that dial this one may sync.
    static func start(peer: SmallPeer, client: SyncClient.Configuration, syncGroup: UInt32, interfaces: [String], listenPort: Int,
                      policy: PeerPolicy, logger: Logger) async throws -> PeerLANLinks {
        let group = try EventLoopGroup(threads: 1)
        let loop = group.next()
        let served = LoopBound(ServedPeerLinks(loop: loop, peer: peer, policy: policy, logger: logger), loop: loop)
        let listener: LoopBound<TCPListener>
        let daemon: MDNSDaemon
        do {
            let address = try SocketAddress(ip: "::", port: listenPort)
            listener = try await loop.submit { () throws -> LoopBound<TCPListener> in
                LoopBound(try TCPListener(address: address, loop: loop) { fd, remote in
                    logger.notice("LAN peer link accepted", metadata: ["from": "\(remote)"])
                    served.value.serve(fd: fd, remote: remote)
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
        return PeerLANLinks(port: port, group: group, listener: listener, daemon: daemon, links: links, served: served)
    }

    /// Goodbyes, the links end, the listener closes.
    func stop() async {
        await daemon.stop()
        await links.stop()
        let listener = self.listener, served = self.served
        try? await listener.loop.submit {
            listener.value.close()
            served.value.closeAll()
        }
        group.shutdown()
    }
}

/// The links other small peers dialled, served by this peer (the sync protocol with the stream
/// framing of PROTOCOL.md §2, the peer serving as a `SyncSession` serves at a node): each passes
/// the connection policy (`--peer-policy`) in the handshake, as a node's links do. Lives on
/// `loop`, the listener's: created, added to and closed there only.
final class ServedPeerLinks {
    let loop: EventLoop
    private let peer: SmallPeer
    private let configuration: SmallPeer.ServeConfiguration
    private let logger: Logger
    private var links: [ObjectIdentifier: ServedStreamLink] = [:]

    init(loop: EventLoop, peer: SmallPeer, policy: PeerPolicy, logger: Logger) {
        self.loop = loop
        self.peer = peer
        self.logger = logger
        var configuration = SmallPeer.ServeConfiguration()
        configuration.linkType = .accessPoint
        configuration.authenticate = { hello in
            let decision = await SmallPeer.acceptAnyPeer(hello)
            if case .refuse = decision { return decision }
            guard !policy.isEmpty else { return decision }
            let candidate = ConnectionCandidate(hello: hello, link: .accessPoint, remoteAddress: "", principal: nil)
            let verdict = await policy.decide(candidate)
            guard case .deny(let reason, let retryAfter) = verdict.decision else { return decision }
            logger.notice("LAN peer denied by the connection policy",
                          metadata: ["device": "\(hello.deviceName)", "peerKey": "\(candidate.peerKeyHex)", "decidedBy": "\(verdict.source)"])
            return .refuse(code: .policy, reason: RetryHint.reason(reason, retryAfterSeconds: retryAfter))
        }
        self.configuration = configuration
    }

    /// Serves one accepted descriptor (closed if it cannot be adopted). On `loop`.
    func serve(fd: Int32, remote: SocketAddress) {
        let bound = LoopBound(self, loop: loop)
        let box = Mutex<ObjectIdentifier?>(nil)
        do {
            let link = try ServedStreamLink(fd: fd, remote: remote, loop: loop, tls: nil, peer: peer, configuration: configuration) {
                bound.loop.execute { if let id = box.withLock({ $0 }) { bound.value.links[id] = nil } }
            }
            let id = ObjectIdentifier(link)
            box.withLock { $0 = id }
            links[id] = link
            link.start()
        } catch {
            logger.error("cannot serve a LAN peer link", metadata: ["from": "\(remote)", "error": "\(error)"])
        }
    }

    /// Says `bye` on every served link (the node is going away). On `loop`.
    func closeAll() {
        for link in links.values { link.close(code: SyncCloseCode.goingAway.rawValue, reason: "the peer is shutting down") }
        links = [:]
    }
}
