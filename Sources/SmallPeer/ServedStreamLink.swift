import Sockets
import Sync
import SyncPeer
import SyncProtocol
import Synchronization

/// One accepted LAN TCP link a small peer serves (`SmallPeer.serve`) on an accepted
/// `StreamLinkConnection` (the length-prefixed frames of PROTOCOL.md §2, `bye` with the close code
/// before a close), as a BigPeer node's `SyncLinkHandler` does. Whoever listens (the CLI's
/// `peer --lan --listen`) adopts each accepted descriptor on a loop:
///
///     let link = try ServedStreamLink(fd: fd, remote: remote, loop: loop, tls: tls, peer: peer)
///     link.start()
///
/// **Threading.** Created and called on `loop` only (keep it in a `LoopBound` to close it from
/// elsewhere). The session's transport closures run on any thread and reach the link through
/// `loop.execute`, whose FIFO order keeps the session's message order.
public final class ServedStreamLink {
    public let loop: EventLoop
    private let peer: SmallPeer
    private let configuration: SmallPeer.ServeConfiguration
    private var link: StreamLinkConnection?
    private var session: SyncConnection?
    /// The socket's queued output as last seen on the loop, for the session's `queuedBytes`.
    private let queued = QueuedBytes()
    private let onClose: @Sendable () -> Void

    /// Adopts an accepted descriptor (closed here if that fails). Must run on `loop`. Nothing is
    /// delivered before `start` (the link starts without credit).
    public init(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?, peer: SmallPeer,
                configuration: SmallPeer.ServeConfiguration = SmallPeer.ServeConfiguration(),
                onClose: @escaping @Sendable () -> Void = {}) throws {
        self.loop = loop
        self.peer = peer
        self.configuration = configuration
        self.onClose = onClose
        // Strong: the link keeps this object until it closes (then it drops its callbacks).
        let callbacks = LinkCallbacks(
            connected: { self.openSession() },
            received: { message in self.session?.receive(message) },
            drained: { self.drained() },
            closed: { _ in self.closed() })
        link = try StreamLinkConnection.accepted(fd: fd, remote: remote, loop: loop, tls: tls,
                                                 maxMessageSize: configuration.session.limits.maxMessageSize,
                                                 maxFirstMessageSize: configuration.session.limits.maxHelloBytes, credit: 0, callbacks: callbacks)
    }

    /// Starts the session: now on plain TCP; with TLS once the handshake is done.
    public func start() {
        guard let link, !link.isTLS else { return }
        openSession()
    }

    private func openSession() {
        guard let link, session == nil else { return }
        let bound = LoopBound(self, loop: loop)
        let queued = self.queued
        let transport = SyncConnection.Transport(
            send: { bytes in
                bound.loop.execute {
                    guard let link = bound.value.link else { return }
                    link.send(bytes)
                    queued.bytes.store(link.queuedBytes, ordering: .relaxed)
                }
            },
            close: { code, reason in bound.loop.execute { bound.value.close(code: code, reason: reason) } },
            queuedBytes: { queued.bytes.load(ordering: .relaxed) },
            notifyWhenDrained: {
                bound.loop.execute {
                    let served = bound.value
                    guard let link = served.link else { return }
                    queued.bytes.store(link.queuedBytes, ordering: .relaxed)
                    if !link.requestDrainNotification() { served.session?.transportDrained() }  // else `drained` follows
                }
            })
        session = peer.serve(transport: transport, configuration: configuration, executor: loop)
        link.grantCredit(.max)
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2).
    public func close(code: UInt16, reason: String) {
        link?.close(code: code, reason: configuration.session.limits.closeReason(reason))
    }

    private func drained() {
        queued.bytes.store(link?.queuedBytes ?? 0, ordering: .relaxed)
        session?.transportDrained()
    }

    private func closed() {
        link = nil
        session?.transportClosed()
        session = nil
        onClose()
    }
}

private final class QueuedBytes: Sendable {
    let bytes = Atomic<Int>(0)
}
