import Logging
import Sockets
import Sync
import SyncPeer
import SyncProtocol

/// One accepted peer link bridged to a session driver, whatever its kind (`MessageLink`): a sync
/// WebSocket (`SyncRoute`: `WebSocketMessageLink`, binary messages only), a LAN TCP link
/// (`LANPeerListener`: `StreamLinkConnection`, PROTOCOL.md §2) or a BLE L2CAP channel
/// (`BLEPeerListener`: `PacketSyncLink`, §2.1). The link does the framing, limits, `bye` and (BLE)
/// keepalive and supervision; this class only joins it to the session.
///
/// **Threading.** Created and called on its link's loop only. The transport closures given to
/// `SyncConnection` may run on any thread; they reach the link through a `LoopBound` inside
/// `loop.execute`, and messages leave in the order the session produced them (`SyncOutbox`).
final class SyncLinkHandler {
    /// What differs between the kinds of link.
    struct Kind {
        /// For presence and the connection policy.
        var type: LinkType
        /// Where the session stops producing (a BLE channel carries ~22 kB/s: 256 KiB is ~12 s of it).
        var maxQueuedBytes: Int
        /// The session starts once the link reports `connected` (TLS), not at once.
        var waitsForHandshake = false
        static let lan = Kind(type: .accessPoint, maxQueuedBytes: 1 << 20)
        static let ble = Kind(type: .bluetooth, maxQueuedBytes: 256 << 10)
        /// The socket's high-water mark (`SyncRoute.sessionQueueLimit`), where the WebSocket layer
        /// also stops reading from the peer.
        static func webSocket(maxQueuedBytes: Int) -> Kind { Kind(type: .webSocket, maxQueuedBytes: maxQueuedBytes) }
    }

    let number: UInt64
    let remote: String
    let loop: EventLoop
    private let kind: Kind
    private let route: SyncRoute
    private let registry: SyncSessionRegistry
    private let onClose: @Sendable () -> Void
    private var link: (any MessageLink)?
    private var connection: SyncConnection?
    private let outbox = SyncOutbox()

    /// Adopts an accepted link made by `accept` with these callbacks and no receive credit (nothing
    /// is delivered before the session exists). Must run on `loop`. Nil when `accept` fails (it
    /// closes the descriptor).
    init?(number: UInt64, remote: String, kind: Kind, loop: EventLoop, route: SyncRoute, registry: SyncSessionRegistry,
          onClose: @escaping @Sendable () -> Void, accept: (LinkCallbacks) throws -> any MessageLink) {
        self.number = number
        self.remote = remote
        self.kind = kind
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
        do { link = try accept(callbacks) } catch {
            route.logger.warning("cannot adopt a \(kind.type.rawValue) peer link", metadata: ["remote": "\(remote)", "error": "\(error)"])
            return nil
        }
    }

    /// Takes an open link (a WebSocket once upgraded) and starts its session at once.
    init(number: UInt64, remote: String, kind: Kind, route: SyncRoute, registry: SyncSessionRegistry, link: any MessageLink) {
        self.number = number
        self.remote = remote
        self.kind = kind
        self.loop = link.loop
        self.route = route
        self.registry = registry
        self.onClose = {}
        self.link = link
        // Strong: the link keeps this object until it closes (then it drops its callbacks).
        link.callbacks = LinkCallbacks(
            connected: {},
            received: { message in self.connection?.receive(message) },
            drained: { self.drained() },
            closed: { _ in self.closed() })
        openSession()
    }

    /// Starts the session now, or once the handshake is done (`connected`) for a link that has one.
    func start() {
        guard !kind.waitsForHandshake else { return }
        openSession()
    }

    private func openSession() {
        guard let link, connection == nil else { return }
        openSession(on: link)
    }

    /// Generic so the transport holds the link's concrete class, not an existential.
    private func openSession<Link: MessageLink>(on link: Link) {
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
        configuration.maxQueuedBytes = kind.maxQueuedBytes
        connection = route.startSession(number: number, configuration: configuration, transport: transport, outbox: outbox,
                                         executor: loop, registry: registry, remote: remote, link: kind.type)
        link.grantCredit(.max)
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2, §2.1).
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
