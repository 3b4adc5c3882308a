import ConnectionPolicy
import Logging
import Sockets
import Sync
import SyncPeer
import SyncProtocol

/// One LAN TCP peer link (`LANPeerListener`): the bridge between a `TCPConnection` (loop-owned)
/// and the session driver, as `SyncSocketHandler` is for a WebSocket. Frames are decoded with
/// `StreamFrameDecoder` (a length above the limit closes the link before anything is buffered for
/// it); a close says `bye` with its code first (PROTOCOL.md §2), since a stream has no close frame.
///
/// **Threading.** Created and called on its connection's loop only. The transport closures given
/// to `SyncConnection` may run on any thread; they reach the connection through a `LoopBound`
/// inside `loop.execute`, and messages leave in the order the session produced them (`SyncOutbox`).
final class SyncStreamHandler: ConnectionDelegate {
    let number: UInt64
    let remote: String
    let loop: EventLoop
    private let route: SyncRoute
    private let registry: SyncSessionRegistry
    private let onClose: @Sendable () -> Void
    private var tcp: TCPConnection?
    private var decoder: StreamFrameDecoder
    private var connection: SyncConnection?
    private let outbox = SyncOutbox()
    private var closing = false

    /// Adopts an accepted descriptor (closed here if that fails). Must run on `loop`.
    init?(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?, number: UInt64, route: SyncRoute,
          registry: SyncSessionRegistry, onClose: @escaping @Sendable () -> Void) {
        self.number = number
        self.remote = "\(remote)"
        self.loop = loop
        self.route = route
        self.registry = registry
        self.onClose = onClose
        decoder = StreamFrameDecoder(maxMessageSize: route.session.limits.maxMessageSize)
        do {
            // Write limits as the WebSocket's (`SyncRoute.webSocketLimits`).
            tcp = try TCPConnection.servedSyncLink(fd: fd, remote: remote, loop: loop, tls: tls,
                                                   maxMessageSize: route.session.limits.maxMessageSize)
        } catch {
            route.logger.warning("cannot adopt a LAN peer link", metadata: ["remote": "\(remote)", "error": "\(error)"])
            return nil
        }
    }

    func start() {
        guard let tcp else { return }
        tcp.delegate = self
        do { try tcp.start() } catch {
            route.logger.warning("cannot start a LAN peer link", metadata: ["remote": "\(remote)", "error": "\(error)"])
            tcp.close()
            return
        }
        // Plain TCP is ready at once; with TLS, `connectionIsReady` follows the handshake.
        if !tcp.isTLS { openSession() }
    }

    func connectionIsReady(_ connection: TCPConnection) {
        if self.connection == nil { openSession() }
    }

    private func openSession() {
        guard let tcp else { return }
        let bound = LoopBound(self, loop: loop)
        let transport = outbox.loopTransport(
            LoopBound(tcp, loop: loop),
            write: { tcp, messages in
                tcp.batchingWrites { for message in messages { tcp.write(StreamFraming.frame(message)) } }
                return tcp.pendingOutputBytes
            },
            queued: { $0.pendingOutputBytes }, requestDrain: { $0.requestDrainNotification() },
            close: { code, reason in bound.loop.execute { bound.value.close(code: code, reason: reason) } })
        var configuration = route.session
        configuration.sessionID = "\(route.session.sessionID)-\(number)"
        configuration.maxQueuedBytes = 1 << 20
        connection = route.startSession(number: number, configuration: configuration, transport: transport, outbox: outbox,
                                         executor: loop, registry: registry, remote: remote, link: .accessPoint)
    }

    /// Says `bye` with `code` and closes once it is written (PROTOCOL.md §2).
    func close(code: UInt16, reason: String) {
        guard let tcp, !closing else { return }
        closing = true
        tcp.write(StreamFraming.frame(SyncMessage.bye(code: code, reason: route.session.limits.closeReason(reason)).encode()))
        tcp.closeAfterFlush()
    }

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        guard !closing else { return }
        do {
            for message in try decoder.feed(bytes) {
                self.connection?.receive(message)
                if closing { return }
            }
        } catch {
            close(code: error.closeCode.rawValue, reason: "invalid frame length")
        }
    }

    func connectionDidDrain(_ connection: TCPConnection) {
        outbox.noteSocket(queued: connection.pendingOutputBytes)
        outbox.takeDrainRequest()?.transportDrained()
    }

    func connectionDidClose(_ connection: TCPConnection, error: (any Error)?) {
        tcp = nil
        self.connection?.transportClosed()
        self.connection = nil
        outbox.release()
        onClose()
    }
}
