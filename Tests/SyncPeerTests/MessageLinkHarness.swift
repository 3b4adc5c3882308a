// Two ends of a real link for `MessageLinkAcceptanceTests`, one per transport, over loopback:
// WebSocket (a `WebSocketMessageLink` dialling a real HTTP server whose endpoint hands out
// accepted links), LAN TCP (`StreamLinkConnection` both ways) and the AF_UNIX SEQPACKET stand-in
// for BLE (`PacketSyncLink` both ways, MTU 128 so messages are cut into many SDUs). Ports are
// ephemeral and socket paths in a temporary directory of the harness's own: parallel-safe.

import BigPeerTestSupport
import HTTP
import Sockets
import SyncPeer
import SyncProtocol
import Testing
import WebSocket

enum LinkKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case webSocket, tcp, seqpacket
    var testDescription: String { rawValue }

    /// The code a receiver closes with when a message is above its limit.
    var tooLargeCode: UInt16 { self == .webSocket ? 1009 : SyncCloseCode.messageTooLarge.rawValue }
}

/// What one end reported (appended on its loop, read by the test).
final class LinkProbe: Sendable {
    let received = MutexBox<[[UInt8]]>([])
    let connected = MutexBox(false)
    let drains = MutexBox(0)
    let closes = MutexBox<[LinkClose]>([])

    var callbacks: LinkCallbacks {
        LinkCallbacks(connected: { self.connected.withLock { $0 = true } },
                      received: { m in self.received.withLock { $0.append(m) } },
                      drained: { self.drains.withLock { $0 += 1 } },
                      closed: { c in self.closes.withLock { $0.append(c) } })
    }

    var receivedCount: Int { received.withLock { $0.count } }
    var closeCount: Int { closes.withLock { $0.count } }
    var firstClose: LinkClose? { closes.withLock { $0.first } }
}

/// A link end the test calls on its loop.
struct LinkEnd: Sendable {
    let link: LoopBound<any MessageLink>
    let probe: LinkProbe

    func run<T: Sendable>(_ body: @escaping @Sendable (any MessageLink) throws -> T) async throws -> T {
        let link = self.link
        return try await link.loop.submit { try body(link.value) }
    }
}

/// Both ends of one link and what tears them down.
final class LinkPair: Sendable {
    let kind: LinkKind
    let client: LinkEnd
    let server: LinkEnd
    private let teardown: @Sendable () async -> Void

    init(kind: LinkKind, client: LinkEnd, server: LinkEnd, teardown: @escaping @Sendable () async -> Void) {
        self.kind = kind
        self.client = client
        self.server = server
        self.teardown = teardown
    }

    func close() async { await teardown() }

    /// Opens a link of `kind`: the dialling end takes up to `clientMax` bytes a message, the
    /// accepting end `serverMax` and starts with `serverCredit` messages of credit.
    static func open(_ kind: LinkKind, clientMax: Int = 1 << 20, serverMax: Int = 1 << 20, serverCredit: Int = .max) async throws -> LinkPair {
        let group = try EventLoopGroup(threads: 1)
        do {
            let pair: LinkPair
            switch kind {
            case .tcp: pair = try await tcp(group, clientMax: clientMax, serverMax: serverMax, serverCredit: serverCredit)
            case .seqpacket: pair = try await seqpacket(group, clientMax: clientMax, serverMax: serverMax, serverCredit: serverCredit)
            case .webSocket: pair = try await webSocket(group, clientMax: clientMax, serverMax: serverMax, serverCredit: serverCredit)
            }
            return pair
        } catch {
            group.shutdown()
            throw error
        }
    }

    private static func tcp(_ group: EventLoopGroup, clientMax: Int, serverMax: Int, serverCredit: Int) async throws -> LinkPair {
        let loop = group.next()
        let (clientProbe, serverProbe) = (LinkProbe(), LinkProbe())
        let accepted = MutexBox<LoopBound<any MessageLink>?>(nil)
        let (listener, port) = try await loop.submit { () throws -> (LoopBound<TCPListener>, Int) in
            let listener = try TCPListener(address: SocketAddress(ip: "127.0.0.1", port: 0), loop: loop) { fd, remote in
                guard let link = try? StreamLinkConnection.accepted(fd: fd, remote: remote, loop: loop, tls: nil, maxMessageSize: serverMax,
                                                                     credit: serverCredit, callbacks: serverProbe.callbacks) else { return }
                accepted.withLock { $0 = LoopBound(link, loop: loop) }
            }
            return (LoopBound(listener, loop: loop), listener.localAddress.port)
        }
        let client = try await loop.submit { () throws -> LoopBound<any MessageLink> in
            let link = try StreamLinkConnection.connect(to: SocketAddress(ip: "127.0.0.1", port: port), loop: loop, tls: nil, serverName: nil,
                                                        maxMessageSize: clientMax, callbacks: clientProbe.callbacks)
            return LoopBound(link, loop: loop)
        }
        return try await finish(.tcp, client: LinkEnd(link: client, probe: clientProbe), serverProbe: serverProbe, accepted: accepted) {
            try? await loop.submit { listener.value.close() }
            group.shutdown()
        }
    }

    private static func seqpacket(_ group: EventLoopGroup, clientMax: Int, serverMax: Int, serverCredit: Int) async throws -> LinkPair {
        let loop = group.next()
        let directory = try TemporaryDirectory("link-suite")
        let address = PacketLinkAddress.unixStandIn(path: directory.path + "/l2cap.sock")
        let options = PacketSocketOptions(standInMTU: 128)
        let (clientProbe, serverProbe) = (LinkProbe(), LinkProbe())
        let accepted = MutexBox<LoopBound<any MessageLink>?>(nil)
        // Keepalives far apart: the counters then hold only what the tests sent.
        func configuration(_ max: Int) -> PacketSyncLink.Configuration {
            var c = PacketSyncLink.Configuration(maxMessageSize: max)
            c.keepaliveInterval = .seconds(3600)
            c.supervisionTimeout = .seconds(7200)
            return c
        }
        let (serverConfiguration, clientConfiguration) = (configuration(serverMax), configuration(clientMax))
        let listener = try await loop.submit { () throws -> LoopBound<PacketListener> in
            let listener = try PacketListener(address: address, options: options, loop: loop) { fd in
                guard let link = try? PacketSyncLink.accepted(fd: fd, address: address, options: options, configuration: serverConfiguration,
                                                               loop: loop, credit: serverCredit, callbacks: serverProbe.callbacks) else { return }
                accepted.withLock { $0 = LoopBound(link, loop: loop) }
            }
            return LoopBound(listener, loop: loop)
        }
        let client = try await loop.submit { () throws -> LoopBound<any MessageLink> in
            let link = try PacketSyncLink.connect(to: address, options: options, configuration: clientConfiguration, loop: loop,
                                                  callbacks: clientProbe.callbacks)
            return LoopBound(link, loop: loop)
        }
        return try await finish(.seqpacket, client: LinkEnd(link: client, probe: clientProbe), serverProbe: serverProbe, accepted: accepted) {
            try? await loop.submit { listener.value.close() }
            group.shutdown()
            _ = directory
        }
    }

    private static func webSocket(_ group: EventLoopGroup, clientMax: Int, serverMax: Int, serverCredit: Int) async throws -> LinkPair {
        let loop = group.next()
        let (clientProbe, serverProbe) = (LinkProbe(), LinkProbe())
        let accepted = MutexBox<LoopBound<any MessageLink>?>(nil)
        var router = HTTPRouter()
        router.get("/sync", WebSocketEndpoint(
            handshake: WebSocketServerHandshake(subprotocols: [SyncProtocol.webSocketSubprotocol], requireSubprotocol: true, deflate: nil),
            configuration: WebSocketConfiguration(maxFrameSize: serverMax, maxMessageSize: serverMax, pingInterval: nil),
            makeHandler: { _, _ in
                WebSocketMessageLink.handler(maxMessageSize: serverMax, credit: serverCredit) { link in
                    link.callbacks = serverProbe.callbacks
                    accepted.withLock { $0 = LoopBound(link, loop: link.loop) }
                }
            }).httpHandler)
        var configuration = HTTPServerConfiguration()
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.threads = 1
        let server = try HTTPServer(configuration: configuration, router: router)
        try await server.start()
        let port = server.localPort ?? 0
        let client: LoopBound<any MessageLink>
        do {
            client = try await loop.submit { () throws -> LoopBound<any MessageLink> in
                guard let url = WebSocketURL("ws://127.0.0.1:\(port)/sync") else { throw LinkHarnessError("bad URL") }
                let link = try WebSocketMessageLink.connect(
                    url: url, address: SocketAddress(ip: "127.0.0.1", port: port), loop: loop, subprotocol: SyncProtocol.webSocketSubprotocol,
                    configuration: WebSocketConfiguration(maxFrameSize: clientMax, maxMessageSize: clientMax, pingInterval: nil), tls: nil,
                    callbacks: clientProbe.callbacks)
                return LoopBound(link, loop: loop)
            }
        } catch {
            await server.shutdown(deadline: .milliseconds(100))
            throw error
        }
        return try await finish(.webSocket, client: LinkEnd(link: client, probe: clientProbe), serverProbe: serverProbe, accepted: accepted) {
            await server.shutdown(deadline: .milliseconds(200))
            group.shutdown()
        }
    }

    /// Waits until the dialling end is connected and the accepting end exists.
    private static func finish(_ kind: LinkKind, client: LinkEnd, serverProbe: LinkProbe, accepted: MutexBox<LoopBound<any MessageLink>?>,
                               teardown: @escaping @Sendable () async -> Void) async throws -> LinkPair {
        guard await eventually({ client.probe.connected.withLock { $0 } && accepted.withLock { $0 } != nil }),
              let server = accepted.withLock({ $0 }) else {
            await teardown()
            throw LinkHarnessError("\(kind) link did not open (client closes: \(client.probe.closes.withLock { $0 }))")
        }
        return LinkPair(kind: kind, client: client, server: LinkEnd(link: server, probe: serverProbe), teardown: teardown)
    }
}

struct LinkHarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
