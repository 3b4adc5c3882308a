import Logging
import Sockets
import Sync
import SyncPeer
import SyncProtocol

/// One BLE peer link (`BLEPeerListener`): the bridge between a `PacketSyncLink` (loop-owned:
/// SDU framing, keepalive, supervision) and the session driver, as `SyncStreamHandler` is for a
/// LAN TCP link. Presence lists it with link type `Bluetooth`.
///
/// **Threading.** Created and called on its link's loop only. The transport closures given to
/// `SyncConnection` may run on any thread; they reach the link through a `LoopBound` inside
/// `loop.execute`, and messages leave in the order the session produced them (`SyncOutbox`).
final class SyncPacketHandler {
    let number: UInt64
    let remote: String
    let loop: EventLoop
    private let route: SyncRoute
    private let registry: SyncSessionRegistry
    private let onClose: @Sendable () -> Void
    private var link: PacketSyncLink?
    private var connection: SyncConnection?
    private let outbox = SyncOutbox()

    /// Adopts an accepted channel and starts its session (the descriptor is closed here if that
    /// fails). Must run on `loop`.
    init?(fd: Int32, address: PacketLinkAddress, options: PacketSocketOptions, configuration: PacketSyncLink.Configuration, loop: EventLoop,
          number: UInt64, route: SyncRoute, registry: SyncSessionRegistry, onClose: @escaping @Sendable () -> Void) {
        self.number = number
        self.remote = "\(address)#\(number)"
        self.loop = loop
        self.route = route
        self.registry = registry
        self.onClose = onClose
        let callbacks = PacketSyncLink.Callbacks(
            connected: {},
            received: { [weak self] message in self?.connection?.receive(message) },
            drained: { [weak self] in self?.drained() },
            closed: { [weak self] _ in self?.closed() })
        do {
            link = try PacketSyncLink.accepted(fd: fd, address: address, options: options, configuration: configuration, loop: loop,
                                               callbacks: callbacks)
        } catch {
            route.logger.warning("cannot adopt a BLE peer link", metadata: ["remote": "\(address)", "error": "\(error)"])
            return nil
        }
        openSession()
    }

    private func openSession() {
        guard let link else { return }
        let bound = LoopBound(self, loop: loop)
        let transport = outbox.loopTransport(
            LoopBound(link, loop: loop),
            write: { link, messages in
                for message in messages { link.send(message) }
                return link.queuedBytes
            },
            queued: { $0.queuedBytes }, requestDrain: { $0.requestDrainNotification() },
            close: { code, reason in bound.loop.execute { bound.value.close(code: code, reason: reason) } })
        var configuration = route.session
        configuration.sessionID = "\(route.session.sessionID)-\(number)"
        configuration.maxQueuedBytes = 256 << 10  // ~12 s of a 22 kB/s channel
        connection = route.startSession(number: number, configuration: configuration, transport: transport, outbox: outbox,
                                         executor: loop, registry: registry, remote: remote, link: .bluetooth)
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2.1).
    func close(code: UInt16, reason: String) {
        link?.close(code: code, reason: route.session.limits.closeReason(reason))
    }

    private func drained() {
        outbox.noteSocket(queued: link?.queuedBytes ?? 0)
        outbox.takeDrainRequest()?.transportDrained()
    }

    private func closed() {
        link = nil
        connection?.transportClosed()
        connection = nil
        outbox.release()
        onClose()
    }
}
