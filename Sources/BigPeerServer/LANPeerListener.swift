import Logging
import Sockets
import SyncPeer
import Sync
import SyncProtocol
import Synchronization

/// `--lan-port`: LAN TCP peer links, the sync protocol over a byte stream with the
/// length-prefixed framing of PROTOCOL.md §2 (optionally in TLS). A peer on the LAN connects here
/// as it would to `/api/v4/sync`: the same sessions, credentials, session limit and subscription
/// relay (`SyncSessionRegistry`), the same `SyncConnection` driver; only the transport differs
/// (`SyncLinkHandler`).
///
/// **Threading.** The listening socket lives on the group's first loop; each accepted connection
/// is handed round-robin to a loop of the group and stays there. `open` (the handlers, for
/// shutdown) is shared under a mutex.
final class LANPeerListener: Sendable {
    let port: Int
    private let listener: LoopBound<TCPListener>
    private let open: OpenLinks<SyncLinkHandler>

    private init(port: Int, listener: LoopBound<TCPListener>, open: OpenLinks<SyncLinkHandler>) {
        self.port = port
        self.listener = listener
        self.open = open
    }

    /// Binds `host:port` (port 0: any) and starts accepting.
    static func start(host: String, port: Int, tls: TLSContext?, route: SyncRoute, registry: SyncSessionRegistry,
                      group: EventLoopGroup) async throws -> LANPeerListener {
        let address = try SocketAddress(ip: host, port: port)
        let loops = group.loops
        let counter = Atomic<Int>(0)
        let open = OpenLinks<SyncLinkHandler>()
        let first = loops[0]
        let listener = try await first.submit { () throws -> LoopBound<TCPListener> in
            let l = try TCPListener(address: address, loop: first) { fd, remote in
                let loop = loops[counter.wrappingAdd(1, ordering: .relaxed).oldValue % loops.count]
                let adopt: @Sendable () -> Void = {
                    let number = registry.nextNumber()
                    var kind = SyncLinkHandler.Kind.lan
                    kind.waitsForHandshake = tls != nil
                    // Write limits as the WebSocket's (`SyncRoute.webSocketLimits`).
                    guard let handler = SyncLinkHandler(number: number, remote: "\(remote)", kind: kind, loop: loop, route: route, registry: registry,
                                                        onClose: { open.remove(number) }, accept: { callbacks in
                        try StreamLinkConnection.accepted(fd: fd, remote: remote, loop: loop, tls: tls,
                                                          maxMessageSize: route.session.limits.maxMessageSize,
                                                          maxFirstMessageSize: route.session.limits.maxHelloBytes, credit: 0, callbacks: callbacks)
                    }) else { return }
                    open.add(number, LoopBound(handler, loop: loop))
                    handler.start()
                }
                if loop === first { adopt() } else { loop.execute(adopt) }
            }
            return LoopBound(l, loop: first)
        }
        let bound = try await first.submit { listener.value.localAddress.port }
        return LANPeerListener(port: bound, listener: listener, open: open)
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

/// The links open now, so that shutdown can say `bye` on each (LAN TCP and BLE listeners alike).
final class OpenLinks<Handler: AnyObject>: Sendable {
    private let links = Mutex<[UInt64: LoopBound<Handler>]>([:])
    func add(_ number: UInt64, _ link: LoopBound<Handler>) { links.withLock { $0[number] = link } }
    func remove(_ number: UInt64) { _ = links.withLock { $0.removeValue(forKey: number) } }
    var all: [LoopBound<Handler>] { links.withLock { Array($0.values) } }
}
