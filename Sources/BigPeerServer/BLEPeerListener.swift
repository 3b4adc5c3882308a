import Logging
import Sockets
import Sync
import SyncPeer
import SyncProtocol
import Synchronization

/// `--ble`: BLE L2CAP peer links (or, in tests, the AF_UNIX SEQPACKET stand-in), the sync protocol
/// in SDUs (PROTOCOL.md §2.1). A phone connects here as it would to `/api/v4/sync`: the same
/// sessions, credentials, connection policy (`SyncAdmission`), session limit and subscription
/// relay; only the transport differs (`SyncLinkHandler` over a `PacketSyncLink`). Bound with PSM 0, the kernel picks a
/// dynamic PSM: `psm` is what the advertisement and the GATT PSM characteristic must carry.
///
/// **Threading.** The listening socket lives on the group's first loop; each accepted channel is
/// handed round-robin to a loop of the group and stays there. `open` is shared under a mutex.
final class BLEPeerListener: Sendable {
    /// The PSM peers connect to (nil on the stand-in).
    let psm: UInt16?
    let address: PacketLinkAddress
    private let listener: LoopBound<PacketListener>
    private let open: OpenLinks<SyncLinkHandler>

    private init(psm: UInt16?, address: PacketLinkAddress, listener: LoopBound<PacketListener>, open: OpenLinks<SyncLinkHandler>) {
        self.psm = psm
        self.address = address
        self.listener = listener
        self.open = open
    }

    /// Binds `address` and starts accepting. An L2CAP bind where there is no Bluetooth throws
    /// `PacketSocketError.bleUnavailable` (the caller says so once and runs on).
    static func start(address: PacketLinkAddress, options: PacketSocketOptions, link: PacketSyncLink.Configuration,
                      route: SyncRoute, registry: SyncSessionRegistry, group: EventLoopGroup) async throws -> BLEPeerListener {
        let loops = group.loops
        let counter = Atomic<Int>(0)
        let open = OpenLinks<SyncLinkHandler>()
        let first = loops[0]
        let listener = try await first.submit { () throws -> LoopBound<PacketListener> in
            let l = try PacketListener(address: address, options: options, loop: first) { fd in
                let loop = loops[counter.wrappingAdd(1, ordering: .relaxed).oldValue % loops.count]
                let adopt: @Sendable () -> Void = {
                    let number = registry.nextNumber()
                    guard let handler = SyncLinkHandler(number: number, remote: "\(address)#\(number)", kind: .ble, loop: loop, route: route,
                                                        registry: registry, onClose: { open.remove(number) }, accept: { callbacks in
                        try PacketSyncLink.accepted(fd: fd, address: address, options: options, configuration: link, loop: loop,
                                                    credit: 0, callbacks: callbacks)
                    }) else { return }
                    open.add(number, LoopBound(handler, loop: loop))
                    handler.start()
                }
                if loop === first { adopt() } else { loop.execute(adopt) }
            }
            return LoopBound(l, loop: first)
        }
        let psm = try await first.submit { listener.value.psm }
        return BLEPeerListener(psm: psm, address: address, listener: listener, open: open)
    }

    /// The listener `configuration` asks for; nil when there is none, or when there is no
    /// Bluetooth here (said once, as a warning: the node runs on without BLE).
    static func startIfAvailable(_ configuration: BLEConfiguration?, maxMessageSize: Int, route: SyncRoute, registry: SyncSessionRegistry,
                                 group: EventLoopGroup, logger: Logger) async throws -> BLEPeerListener? {
        guard let configuration else { return nil }
        var link = PacketSyncLink.Configuration(maxMessageSize: maxMessageSize)
        link.keepaliveInterval = configuration.keepaliveInterval
        link.supervisionTimeout = configuration.supervisionTimeout
        do {
            let listener = try await start(address: configuration.address, options: configuration.socket, link: link, route: route,
                                           registry: registry, group: group)
            logger.notice("accepting BLE peer links", metadata: ["address": "\(configuration.address)", "psm": "\(listener.psm.map { "\($0)" } ?? "-")"])
            return listener
        } catch let error as PacketSocketError {
            guard case .bleUnavailable = error else { throw error }
            logger.warning("\(error)", metadata: ["adapter": "\(configuration.adapter)"])
            return nil
        }
    }

    /// Stops accepting and ends every open link with `bye` 1001.
    func stop() async {
        let listener = self.listener
        listener.loop.execute { listener.value.close() }
        for handler in open.all {
            handler.loop.execute { handler.value.close(code: SyncCloseCode.goingAway.rawValue, reason: "server shutting down") }
        }
    }
}
