import ConnectionPolicy
import Logging
import Sockets
import Sync
import SyncPeer
import SyncProtocol

/// One LAN TCP peer link (`LANPeerListener`): the bridge between an accepted
/// `StreamLinkConnection` (loop-owned: the length-prefixed framing, where a length above the limit
/// closes the link before anything is buffered for it, and `bye` before a close, PROTOCOL.md §2)
/// and the session driver, as `SyncSocketHandler` is for a WebSocket.
///
/// **Threading.** Created and called on its connection's loop only. The transport closures given
/// to `SyncConnection` may run on any thread; they reach the link through a `LoopBound` inside
/// `loop.execute`, and messages leave in the order the session produced them (`SyncOutbox`).
final class SyncStreamHandler {
    let number: UInt64
    let remote: String
    let loop: EventLoop
    private let route: SyncRoute
    private let registry: SyncSessionRegistry
    private let onClose: @Sendable () -> Void
    private var link: StreamLinkConnection?
    private var connection: SyncConnection?
    private let outbox = SyncOutbox()

    /// Adopts an accepted descriptor (closed here if that fails). Must run on `loop`. Nothing is
    /// delivered before the session starts (the link starts without credit).
    init?(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?, number: UInt64, route: SyncRoute,
          registry: SyncSessionRegistry, onClose: @escaping @Sendable () -> Void) {
        self.number = number
        self.remote = "\(remote)"
        self.loop = loop
        self.route = route
        self.registry = registry
        self.onClose = onClose
        // Strong: the link keeps this object until it closes (then it drops its callbacks).
        let callbacks = LinkCallbacks(
            connected: { self.openSession() },
            received: { message in self.connection?.receive(message) },
            drained: { self.drained() },
            closed: { _ in self.closed() })
        do {
            // Write limits as the WebSocket's (`SyncRoute.webSocketLimits`).
            link = try StreamLinkConnection.accepted(fd: fd, remote: remote, loop: loop, tls: tls,
                                                     maxMessageSize: route.session.limits.maxMessageSize, credit: 0, callbacks: callbacks)
        } catch {
            route.logger.warning("cannot adopt a LAN peer link", metadata: ["remote": "\(remote)", "error": "\(error)"])
            return nil
        }
    }

    /// Starts the session: now on plain TCP; with TLS once the handshake is done (`connected`).
    func start() {
        guard let link, !link.isTLS else { return }
        openSession()
    }

    private func openSession() {
        guard let link, connection == nil else { return }
        let bound = LoopBound(self, loop: loop)
        let transport = outbox.loopTransport(
            LoopBound(link, loop: loop),
            write: { link, messages in
                link.batchingSends { for message in messages { link.send(message) } }
                return link.queuedBytes
            },
            queued: { $0.queuedBytes }, requestDrain: { $0.requestDrainNotification() },
            close: { code, reason in bound.loop.execute { bound.value.close(code: code, reason: reason) } })
        var configuration = route.session
        configuration.sessionID = "\(route.session.sessionID)-\(number)"
        configuration.maxQueuedBytes = 1 << 20
        connection = route.startSession(number: number, configuration: configuration, transport: transport, outbox: outbox,
                                         executor: loop, registry: registry, remote: remote, link: .accessPoint)
        link.grantCredit(.max)  // the link holds what arrives until the session exists
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2).
    func close(code: UInt16, reason: String) {
        link?.close(code: code, reason: route.session.limits.closeReason(reason))
    }

    private func drained() {
        outbox.noteSocket(queued: link?.queuedBytes ?? 0)
        outbox.takeDrainRequest()?.transportDrained()
    }

    private func closed() {
        link = nil
        connection?.transportClosed()  // the registry frees the slot when the session ends
        connection = nil
        outbox.release()
        onClose()
    }
}
