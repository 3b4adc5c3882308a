import Sockets
import Sync
import SyncPeer
import SyncProtocol
import Synchronization

/// One accepted LAN TCP link a small peer serves (`SmallPeer.serve`): the length-prefixed frames of
/// PROTOCOL.md §2 in and out, and `bye` with the close code before a close (a stream has no close
/// frame), as a BigPeer node's `SyncStreamHandler` does. Whoever listens (the CLI's
/// `peer --lan --listen`) adopts each accepted descriptor on a loop:
///
///     let link = try ServedStreamLink(fd: fd, remote: remote, loop: loop, tls: tls, peer: peer)
///     link.start()
///
/// **Threading.** Created and called on `loop` only (keep it in a `LoopBound` to close it from
/// elsewhere). The session's transport closures run on any thread and reach the link through
/// `loop.execute`, whose FIFO order keeps the session's message order.
public final class ServedStreamLink: ConnectionDelegate {
    public let loop: EventLoop
    private let peer: SmallPeer
    private let configuration: SmallPeer.ServeConfiguration
    private var tcp: TCPConnection?
    private var decoder: StreamFrameDecoder
    private var session: SyncConnection?
    private var closing = false
    /// The socket's queued output as last seen on the loop, for the session's `queuedBytes`.
    private let queued = QueuedBytes()
    private let onClose: @Sendable () -> Void

    /// Adopts an accepted descriptor (closed here if that fails). Must run on `loop`.
    public init(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?, peer: SmallPeer,
                configuration: SmallPeer.ServeConfiguration = SmallPeer.ServeConfiguration(),
                onClose: @escaping @Sendable () -> Void = {}) throws {
        self.loop = loop
        self.peer = peer
        self.configuration = configuration
        self.onClose = onClose
        decoder = StreamFrameDecoder(maxMessageSize: configuration.session.limits.maxMessageSize)
        tcp = try TCPConnection.servedSyncLink(fd: fd, remote: remote, loop: loop, tls: tls,
                                               maxMessageSize: configuration.session.limits.maxMessageSize)
    }

    /// Starts reading; the session starts once the link is ready (after the TLS handshake, if any).
    public func start() {
        guard let tcp else { return }
        tcp.delegate = self
        do { try tcp.start() } catch {
            tcp.close()
            return
        }
        if !tcp.isTLS { openSession() }
    }

    public func connectionIsReady(_ connection: TCPConnection) {
        if session == nil { openSession() }
    }

    private func openSession() {
        let bound = LoopBound(self, loop: loop)
        let queued = self.queued
        let transport = SyncConnection.Transport(
            send: { bytes in
                bound.loop.execute {
                    guard let tcp = bound.value.tcp, !bound.value.closing else { return }
                    tcp.write(StreamFraming.frame(bytes))
                    queued.bytes.store(tcp.pendingOutputBytes, ordering: .relaxed)
                }
            },
            close: { code, reason in bound.loop.execute { bound.value.close(code: code, reason: reason) } },
            queuedBytes: { queued.bytes.load(ordering: .relaxed) },
            notifyWhenDrained: {
                bound.loop.execute {
                    let link = bound.value
                    guard let tcp = link.tcp else { return }
                    queued.bytes.store(tcp.pendingOutputBytes, ordering: .relaxed)
                    if !tcp.requestDrainNotification() { link.session?.transportDrained() }  // else connectionDidDrain follows
                }
            })
        session = peer.serve(transport: transport, configuration: configuration, executor: loop)
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2).
    public func close(code: UInt16, reason: String) {
        guard let tcp, !closing else { return }
        closing = true
        tcp.write(StreamFraming.frame(SyncMessage.bye(code: code, reason: configuration.session.limits.closeReason(reason)).encode()))
        tcp.closeAfterFlush()
    }

    public func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !closing else { return }
        do {
            for message in try decoder.feed(bytes) {
                session?.receive(message)
                if closing { return }
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "invalid frame length")
        }
    }

    public func connectionDidDrain(_ connection: TCPConnection) {
        queued.bytes.store(connection.pendingOutputBytes, ordering: .relaxed)
        session?.transportDrained()
    }

    public func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        tcp = nil
        session?.transportClosed()
        session = nil
        onClose()
    }
}

private final class QueuedBytes: Sendable {
    let bytes = Atomic<Int>(0)
}
