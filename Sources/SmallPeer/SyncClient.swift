// The sync client's I/O driver: a `SyncLink` (WebSocket to `GET /api/v4/sync`, reconnecting with
// exponential backoff and full jitter), one `SyncClientSession` per link, the local store on the
// other side. Everything of one client runs on one event-loop thread.
//
//   SmallPeer ──local write──▶ loop.execute ─▶ flush uploads ─▶ session.upload ─▶ WebSocket
//   WebSocket ─binary message─▶ session.receive ─▶ actions: apply to SmallPeer, credit, want, acks
//   close / connect failure ─▶ backoff: min(max, base · 2^attempt) · random(0.5...1) ─▶ connect

import Sockets
import Synchronization
import SyncProtocol
import Values
import SyncPeer

public final class SyncClient: Sendable {
    public struct Configuration: Sendable {
        /// `ws://host:port` or `wss://...` (without a path, `/api/v4/sync`); or `tcp://host:port`
        /// / `tls://host:port` for a LAN TCP peer link to a local node (`bigpeer serve --lan`).
        public var url: String
        public var apiKey: String?
        /// A JWT to present instead of an API key (PROTOCOL.md §4.1.1).
        public var jwt: String?
        /// A token for the server's authentication webhook of this provider, presented instead
        /// of a JWT or an API key: `(provider, token)` (PROTOCOL.md §4.1.1).
        public var providerLogin: (provider: String, token: String)?
        public var deviceName = "smallpeer"
        public var peerKey: [UInt8]?
        public var reconnectBase: Duration = .milliseconds(250)
        public var reconnectMax: Duration = .seconds(30)
        /// Give up (status `.failed`) after this many failed connection attempts in a row; nil: never.
        public var maxConnectAttempts: Int?
        /// "Caught up" needs this long without new data after everything is synced and acked.
        public var quietMillis: UInt64 = 750
        /// CA file for `wss://` in addition to the system's.
        public var additionalCAFile: String?
        /// Run the server's remote queries (a SELECT on this peer's store, PROTOCOL.md §4.15;
        /// `bigpeer peer --allow-remote-query`). Off: they are answered "not allowed".
        public var allowRemoteQueries = false
        /// Keepalive and supervision timeout of a BLE link (`l2cap://`, `seqpacket://`; PROTOCOL.md §2.1).
        public var bleKeepaliveInterval: Duration = .seconds(5)
        public var bleSupervisionTimeout: Duration = .seconds(20)
        /// More links to the same server, least preferred last (`url` is the best): a LAN TCP
        /// link and a BLE one to a local node, say. The session runs on the best link that is up
        /// and moves when that link drops or a better one comes back, resuming where it was
        /// (PROTOCOL.md §4.16): nothing received is sent again.
        public var fallbackURLs: [String] = []
        /// Ask the server for a session that survives its link (always with `fallbackURLs`): a
        /// dropped link reconnects into the same session.
        public var resumable = false
        /// Asked for a fresh token when the server says the session's credentials are about to
        /// expire (`renew`, PROTOCOL.md §4.13): a token of the kind the client logs in with (a JWT
        /// for `jwt`, the provider's token for `providerLogin`, a key for `apiKey`), sent at once
        /// with `auth`. nil (or a nil answer): the session ends at expiry (4001) unless
        /// `updateCredentials` brought new ones. Runs off the client's loop.
        public var tokenProvider: (@Sendable () async -> String?)?

        /// Every link, best first.
        public var urls: [String] { [url] + fallbackURLs }

        public init(url: String, apiKey: String?) {
            self.url = url
            self.apiKey = apiKey
        }
    }

    /// What the client is doing, readable from any thread.
    public struct Status: Sendable, Equatable {
        public enum Phase: Sendable, Equatable { case connecting, connected, stopped, failed }
        public var phase: Phase = .connecting
        /// Every subscription synced, uploads acknowledged, and quiet for `quietMillis`.
        public var caughtUp = false
        /// While connected and not caught up: what the session still waits for.
        public var waitingFor: String?
        public var sessions = 0
        /// WebSocket links opened (a session accepted or not): with `sessions`, how often the
        /// client had to try.
        public var linksOpened = 0
        /// Entries (`docs` + `changes`) received and applied, and documents uploaded (re-sends included), over all sessions.
        public var receivedEntries = 0
        public var uploadedDocuments = 0
        public var lastError: String?
        public var subscriptionErrors: [String: String] = [:]
        public var rejectedUploads: [String] = []
        /// New credentials the server accepted in a session (`updateCredentials`, `tokenProvider`).
        public var credentialRefreshes = 0
        /// `renew` notices received: the server's word that the credentials expire soon.
        public var expiryNotices = 0
        /// The login's `clientInfo` from the server's authentication webhook (`welcome`, `auth_ok`).
        public var clientInfo: Value?
        /// Sessions resumed on a new link (PROTOCOL.md §4.16), and the link the session runs on.
        public var resumes = 0
        public var activeURL: String?
        /// Why sessions ended, oldest first (the last 8): a link that dropped under a session
        /// that could not wait for another link, a timeout, or a resume the server answered
        /// with a new session. A resumable session that moves between links does not end.
        public var sessionEnds: [String] = []
        /// A client that has not started: connecting, nothing synced.
        public init() {}
    }

    public enum ClientError: Error, Sendable, Equatable, CustomStringConvertible {
        case invalidURL(String)
        case failed(String)
        case timedOut(String)

        public var description: String {
            switch self {
            case .invalidURL(let u): "not a ws://, wss://, tcp://, tls://, l2cap:// or seqpacket:// URL: \(u)"
            case .failed(let why): why
            case .timedOut(let why): "not caught up in time: \(why)"
            }
        }
    }

    let peer: SmallPeer
    let group: EventLoopGroup
    let core: LoopBound<SyncClientCore>
    let statusBox: Locked<Status>
    /// The peer's local-change notification of this client.
    let listenerToken: UInt64

    /// Starts syncing `peer` with the server at `configuration.url` (connects in the background).
    /// A peer may have several clients, one per server: each keeps its own upload state and
    /// checkpoints (keyed by the server's site), and every change goes to every server but the one
    /// it came from.
    public init(peer: SmallPeer, configuration: Configuration) throws(ClientError) {
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: 1) } catch { throw .failed("cannot start the client's event loop: \(error)") }
        let loop = group.next()
        var links: [SyncLink] = []
        for url in configuration.urls {
            var linkConfiguration = SyncLink.Configuration(
                url: url, reconnectBase: configuration.reconnectBase, reconnectMax: configuration.reconnectMax,
                maxConnectAttempts: configuration.maxConnectAttempts, additionalCAFile: configuration.additionalCAFile)
            linkConfiguration.packetKeepaliveInterval = configuration.bleKeepaliveInterval
            linkConfiguration.packetSupervisionTimeout = configuration.bleSupervisionTimeout
            do { links.append(try SyncLink(configuration: linkConfiguration, loop: loop)) } catch {
                group.shutdown()
                throw .invalidURL(url)
            }
        }
        self.peer = peer
        self.group = group
        self.statusBox = Locked(Status())
        let core = SyncClientCore(peer: peer, configuration: configuration, links: links, status: statusBox)
        for link in links { link.delegate = core }
        self.core = LoopBound(core, loop: loop)
        let bound = self.core
        listenerToken = peer.addSyncListener { bound.loop.execute { bound.value.localChange() } }
        loop.execute { bound.value.connect() }
    }

    public var status: Status { statusBox.withLock { $0 } }

    /// Waits until caught up (see `Status.caughtUp`), the client fails, or `timeout` passes.
    public func waitUntilCaughtUp(timeout: Duration) async throws(ClientError) {
        let deadline = ContinuousClock.now + timeout
        while true {
            let s = status
            if s.phase == .failed { throw .failed(s.lastError ?? "sync failed") }
            if s.caughtUp { return }
            if ContinuousClock.now >= deadline {
                throw .timedOut(s.sessions == 0 ? "never connected (\(s.lastError ?? "no answer"))" : (s.lastError ?? "still receiving" + (s.waitingFor.map { ": " + $0 } ?? "")))
            }
            do { try await Task.sleep(for: .milliseconds(20)) } catch { throw .timedOut("cancelled") }
        }
    }

    /// Replaces the credentials (a fresh JWT before the old one expires, a new API key): a session
    /// in progress gets them at once (`auth`, PROTOCOL.md §4.13) and keeps going with their
    /// permissions, and every later connection presents them. A server that refuses them closes
    /// the session with 4001.
    public func updateCredentials(jwt: String) { updateCredentials(.jwt(jwt)) }
    public func updateCredentials(apiKey: String) { updateCredentials(.apiKey(apiKey)) }
    public func updateCredentials(provider: String, token: String) { updateCredentials(.provider(provider, token: token)) }

    func updateCredentials(_ credentials: SyncCredentials) {
        let bound = core
        bound.loop.execute { bound.value.updateCredentials(credentials) }
    }

    /// Says `bye`, closes the link and stops the loop. The peer stays open.
    public func stop() async {
        peer.removeSyncListener(listenerToken)
        let bound = core
        bound.loop.execute { bound.value.stop() }
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline, !(statusBox.withLock { $0.phase == .stopped }) {
            try? await Task.sleep(for: .milliseconds(10))
        }
        group.shutdown()
    }
}
