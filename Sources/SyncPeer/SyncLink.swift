// The peer end of a sync link, reconnecting: over WebSocket (`ws://`, `wss://`: `GET
// /api/v4/sync`, subprotocol bigpeer-sync.v1) or over a LAN TCP peer link (`tcp://`, `tls://`: the
// length-prefixed stream of PROTOCOL.md §2, `StreamLinkConnection`), or over a BLE L2CAP channel
// (`l2cap://`, or its AF_UNIX stand-in `seqpacket://`: the SDU framing of PROTOCOL.md §2.1,
// `PacketSyncLink`, `PacketLinkURL`): one `MessageLink` at a time. Resolve the host off the
// loop, connect (TLS for wss:// and tls://), hand each message to the delegate, and after a close
// or a failed attempt connect again after an exponential backoff with full jitter. What runs over the link (a `SyncClientSession`
// and a store) is the delegate's: SmallPeer's `SyncClient` and the server's upstream replicator
// both sit on this class.
//
//   connect ─▶ [resolving] ─▶ [connecting] ─101─▶ [open] ──close/error──▶ backoff ─▶ connect
//                   └──────────── failure ───────────┘
//
// Everything runs on one event-loop thread (`loop`): every method must be called there, and
// every delegate call is made there.

import Sockets
import SyncProtocol
import WebSocket

public protocol SyncLinkDelegate: AnyObject {
    /// The link is up and speaks the sync subprotocol: start a session (send `hello`).
    func syncLinkConnected(_ link: SyncLink)
    /// One binary message; a text message ends the link (violation) without reaching here.
    func syncLink(_ link: SyncLink, received bytes: [UInt8])
    /// The link is down (closed, or the attempt failed); `wasOpen` says whether it had connected.
    /// The link reconnects by itself unless `halt()` or `stop()` was called.
    func syncLinkDown(_ link: SyncLink, reason: String, wasOpen: Bool)
}

public final class SyncLink {
    public struct Configuration: Sendable {
        /// `ws://host:port[/path]` or `wss://...` (without a path, `/api/v4/sync`); or
        /// `tcp://host:port` / `tls://host:port` for a LAN TCP peer link; `l2cap://…` or
        /// `seqpacket://…` for a BLE link (`PacketLinkURL`).
        public var url: String
        public var reconnectBase: Duration = .milliseconds(250)
        public var reconnectMax: Duration = .seconds(30)
        /// Halt after this many failed connection attempts in a row; nil: never.
        public var maxConnectAttempts: Int?
        /// CA file for `wss://` in addition to the system's.
        public var additionalCAFile: String?
        /// Largest WebSocket message accepted (the sync protocol's `hello.max` plus framing room).
        public var maxMessageSize = 17 << 20
        /// Keepalive and supervision of BLE links (`PacketSyncLink`).
        public var packetKeepaliveInterval: Duration = .seconds(5)
        public var packetSupervisionTimeout: Duration = .seconds(20)

        public init(url: String, reconnectBase: Duration = .milliseconds(250), reconnectMax: Duration = .seconds(30),
                    maxConnectAttempts: Int? = nil, additionalCAFile: String? = nil) {
            self.url = url
            self.reconnectBase = reconnectBase
            self.reconnectMax = reconnectMax
            self.maxConnectAttempts = maxConnectAttempts
            self.additionalCAFile = additionalCAFile
        }
    }

    public enum LinkError: Error, Sendable, Equatable, CustomStringConvertible {
        case invalidURL(String)
        case noEventLoop(String)
        public var description: String {
            switch self {
            case .invalidURL(let u):
                "not a ws://, wss://, tcp://, tls://, l2cap://ADDRESS/PSM or seqpacket:///PATH URL (tcp:// and tls:// need a port and no path): \(u)"
            case .noEventLoop(let why): "cannot start the link's event loop: \(why)"
            }
        }
    }

    /// A link on an event-loop thread of its own (the group is the caller's to shut down once
    /// the link has stopped): what one client of one server wants.
    public static func onOwnLoop(_ configuration: Configuration) throws(LinkError) -> (SyncLink, EventLoopGroup) {
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: 1) } catch { throw .noEventLoop("\(error)") }
        do {
            return (try SyncLink(configuration: configuration, loop: group.next()), group)
        } catch {
            group.shutdown()
            throw error
        }
    }

    public let configuration: Configuration
    /// Host, port and TLS of a WebSocket or TCP URL (the target only matters for WebSocket); a
    /// placeholder for a BLE link (`packetTarget` says where that connects).
    public let url: WebSocketURL
    /// A LAN TCP peer link (`tcp://`, `tls://`) rather than a WebSocket.
    public let isStream: Bool
    /// A BLE link (`l2cap://`, `seqpacket://`): where it connects; nil for the others.
    public let packetTarget: (address: PacketLinkAddress, options: PacketSocketOptions)?
    public let loop: EventLoop
    public weak var delegate: (any SyncLinkDelegate)?
    /// The link up or being made (a WebSocket, TCP or BLE `MessageLink`).
    private var link: (any MessageLink)?
    private var connecting = false
    private var reconnectTimer: TimerID?
    private var tls: TLSContext?
    /// Failed attempts in a row (a connection that opened resets it): the backoff exponent.
    public private(set) var failedAttempts = 0
    /// No reconnecting after `halt()` (or `maxConnectAttempts` failures) until `connectNow()`;
    /// never again after `stop()`.
    public private(set) var halted = false
    /// The current link's session was accepted (`sessionWasAccepted`).
    private var sessionAccepted = false
    /// The least the next reconnect waits (a server's retry hint, `holdOff`); used once.
    private var minimumNextDelay: Duration?
    /// The delay of the reconnect scheduled last.
    public private(set) var scheduledReconnectDelay: Duration?
    private var stopped = false

    public init(configuration: Configuration, loop: EventLoop) throws(LinkError) {
        let text = configuration.url
        packetTarget = PacketLinkURL.parse(text)
        if text.hasPrefix("l2cap://") || text.hasPrefix("seqpacket://") {
            guard packetTarget != nil, let placeholder = WebSocketURL("ws://localhost:1") else { throw .invalidURL(text) }
            self.configuration = configuration
            self.url = placeholder  // unused: a packet link has no host or port
            self.isStream = false
            self.loop = loop
            return
        }
        let stream = text.hasPrefix("tcp://") || text.hasPrefix("tls://")
        // A stream URL has the shape of a WebSocket one without the path: parsed as one.
        let asWebSocket = stream ? (text.hasPrefix("tls://") ? "wss://" : "ws://") + text.dropFirst(6) : text
        guard var url = WebSocketURL(asWebSocket) else { throw .invalidURL(text) }
        if stream {
            let authority = text.dropFirst(6)
            guard url.target == "/", !authority.contains("/"), !authority.contains("?"),
                  authority.hasSuffix(":\(url.port)") else { throw .invalidURL(text) }
        } else if url.target == "/" {
            url.target = "/api/v4/sync"
        }
        // A link-local IPv6 address names its interface as a zone, written `%25` in a URL
        // (RFC 6874): `[fe80::1%253]` is fe80::1 on interface 3, which the resolver reads as `%3`.
        if url.host.contains(":"), let percent = url.host.firstIndex(of: "%"), url.host[percent...].hasPrefix("%25") {
            url.host = String(url.host[..<percent]) + "%" + url.host[url.host.index(percent, offsetBy: 3)...]
        }
        self.configuration = configuration
        self.url = url
        self.isStream = stream
        self.loop = loop
    }

    public var isOpen: Bool { link?.isOpen ?? false }
    /// Whether a connection is being made or is up (so `connectNow` would do nothing).
    public var isActive: Bool { link != nil || connecting }
    /// The current link's counters (nil while none is up or being made).
    public var counters: LinkCounters? { link?.counters }
    /// The BLE channel's counters (nil for the other links, and while none is up).
    public var packetCounters: PacketSyncLink.ChannelCounters? { (link as? PacketSyncLink)?.channelCounters }

    // MARK: - Control

    /// The delegate's session was accepted on this link (`welcome`): the backoff starts over.
    public func sessionWasAccepted() {
        sessionAccepted = true
        failedAttempts = 0
    }

    /// The next reconnect waits at least `delay` (the server said when to retry: a policy refusal
    /// ending with `RetryHint`), whatever the backoff would say. `connectNow` still connects at once.
    public func holdOff(atLeast delay: Duration) {
        minimumNextDelay = max(minimumNextDelay ?? .zero, delay)
    }

    /// Connects now if no connection is up or being made (cancels a pending retry and the halt).
    public func connectNow() {
        guard !stopped else { return }
        halted = false
        if let t = reconnectTimer { loop.cancelTimer(t); reconnectTimer = nil }
        guard !isActive else { return }
        failedAttempts = 0
        minimumNextDelay = nil
        connect()
    }

    /// Stops reconnecting (a refusal that retrying cannot fix); the open connection stays until
    /// it closes. `connectNow()` resumes.
    public func halt() {
        halted = true
        if let t = reconnectTimer { loop.cancelTimer(t); reconnectTimer = nil }
    }

    /// Closes for good (the delegate gets `syncLinkDown` once the close completes).
    public func stop() {
        stopped = true
        halt()
        link?.close(code: SyncCloseCode.normal.rawValue, reason: "")
    }

    /// Sends one message (dropped while no link is open). One above the link's limit closes the
    /// link (4009), as the peer would on receiving it.
    public func send(_ bytes: [UInt8]) {
        guard let link else { return }
        do { try link.send(bytes, completion: nil) } catch {
            if case .tooLarge = error { link.close(code: SyncCloseCode.messageTooLarge.rawValue, reason: "\(error)") }
        }
    }

    public func close(code: UInt16, reason: String) {
        link?.close(code: code, reason: reason)
    }

    // MARK: - Connecting

    private func connect() {
        guard !stopped, !halted, !isActive else { return }
        reconnectTimer = nil
        connecting = true
        if let packetTarget { return openPacket(packetTarget.address, options: packetTarget.options) }
        if let address = try? SocketAddress(ip: url.host, port: url.port) { return open(address) }
        // Names go through the resolver, which blocks: on a thread of its own, off the loop.
        let bound = LoopBound(self, loop: loop)
        let host = url.host, port = url.port
        Task.detached {
            let result = await BlockingCall.run { () -> Result<SocketAddress, IOError> in
                do throws(IOError) {
                    if let first = try SocketAddress.resolve(host: host, port: port).first { return .success(first) }
                    return .failure(IOError(call: "getaddrinfo(\(host))", errno: 2 /* ENOENT */))
                } catch {
                    return .failure(error)
                }
            }
            bound.loop.execute {
                switch result {
                case .success(let address): bound.value.open(address)
                case .failure(let error): bound.value.attemptFailed("cannot resolve \(host): \(error)")
                }
            }
        }
    }

    private func open(_ address: SocketAddress) {
        guard !stopped else { connecting = false; return }
        if url.secure && tls == nil {
            do { tls = try TLSContext(clientWithAdditionalCAFile: configuration.additionalCAFile) } catch {
                return attemptFailed("TLS setup failed: \(error)")
            }
        }
        if isStream { return openStream(address) }
        var ws = WebSocketConfiguration(maxFrameSize: configuration.maxMessageSize, maxMessageSize: configuration.maxMessageSize)
        ws.pingInterval = nil  // the sync protocol has its own heartbeat (PROTOCOL.md §5)
        do {
            link = try WebSocketMessageLink.connect(url: url, address: address, loop: loop, subprotocol: SyncProtocol.webSocketSubprotocol,
                                                    configuration: ws, tls: tls, callbacks: linkCallbacks())
        } catch {
            attemptFailed(error.description)
        }
    }

    private func openStream(_ address: SocketAddress) {
        do {
            link = try StreamLinkConnection.connect(to: address, loop: loop, tls: tls, serverName: url.secure ? url.host : nil,
                                                    maxMessageSize: configuration.maxMessageSize, callbacks: linkCallbacks())
        } catch {
            attemptFailed("\(error)")
        }
    }

    /// What the link reports, passed on to the delegate.
    private func linkCallbacks() -> LinkCallbacks {
        LinkCallbacks(
            connected: { [weak self] in
                guard let self else { return }
                self.connecting = false
                self.sessionAccepted = false
                self.delegate?.syncLinkConnected(self)
            },
            received: { [weak self] bytes in
                guard let self else { return }
                self.delegate?.syncLink(self, received: bytes)
            },
            closed: { [weak self] close in
                guard let self else { return }
                self.link = nil
                if close.wasOpen { self.linkClosed(close.description) } else { self.attemptFailed(close.description) }
            })
    }

    private func openPacket(_ address: PacketLinkAddress, options: PacketSocketOptions) {
        var link = PacketSyncLink.Configuration(maxMessageSize: configuration.maxMessageSize)
        link.keepaliveInterval = configuration.packetKeepaliveInterval
        link.supervisionTimeout = configuration.packetSupervisionTimeout
        do {
            self.link = try PacketSyncLink.connect(to: address, options: options, configuration: link, loop: loop, callbacks: linkCallbacks())
        } catch {
            attemptFailed("\(error)")
        }
    }

    private func linkClosed(_ why: String) {
        connecting = false
        // A link that closed before its session was accepted counts as a failed attempt.
        if !sessionAccepted { failedAttempts += 1 }
        sessionAccepted = false
        down(why, wasOpen: true)
    }

    private func attemptFailed(_ why: String) {
        link = nil
        connecting = false
        failedAttempts += 1
        down("cannot connect to \(configuration.url): \(why)", wasOpen: false)
    }

    private func down(_ reason: String, wasOpen: Bool) {
        if let max = configuration.maxConnectAttempts, failedAttempts >= max { halted = true }
        delegate?.syncLinkDown(self, reason: reason, wasOpen: wasOpen)
        if !stopped && !halted && reconnectTimer == nil && !isActive { scheduleReconnect() }
    }

    /// Full jitter: a random delay in [d/2, d] with d = min(max, base · 2^attempt).
    private func scheduleReconnect() {
        let exponent = min(failedAttempts, 16)
        let ceiling = min(configuration.reconnectBase * (1 << exponent), configuration.reconnectMax)
        let millis = Double(ceiling.components.seconds) * 1000 + Double(ceiling.components.attoseconds) / 1e15
        let delay = max(Duration.milliseconds(Int64(millis * Double.random(in: 0.5...1.0))), minimumNextDelay ?? .zero)
        minimumNextDelay = nil
        scheduledReconnectDelay = delay
        reconnectTimer = loop.scheduleTimer(after: delay) { [weak self] in self?.connect() }
    }
}
