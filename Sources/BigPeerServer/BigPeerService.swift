import Auth
import ConnectionPolicy
import CRDT
import HTTP
import LANDiscovery
import Logging
import Postgres
import Store
import Sockets
import Sync
import SyncProtocol
import Upstream
import WebSocket

/// One running BigPeer instance: event loops, the database pool, and the HTTP server.
///
/// Lifecycle: `start` opens the database (starting a private cluster if configured), applies
/// migrations, then binds the listener; `stop` stops accepting, lets in-flight requests finish
/// within `shutdownGrace`, closes database sessions, and stops a private cluster unless another
/// process still uses it (`LocalPostgres.stop`).
/// Instances keep no state that matters beyond their open connections, so any number may run
/// against one database.
public final class BigPeerService: Sendable {
    public let configuration: ServerConfiguration
    public let group: EventLoopGroup
    public let database: Database
    public let pool: PostgresPool
    public let store: DocumentStore
    public let attachments: AttachmentStore
    public let http: HTTPServer
    /// Notifications of commits for the store's change feed (`store.changeFeed`).
    private let listener: PostgresListener
    private let follower: Task<Void, Never>
    /// Runs maintenance every `maintenanceInterval` (`MaintenanceSchedule`).
    private let maintenance: Task<Void, Never>?
    /// WebSocket endpoints, closed with 1001 on shutdown (upgraded sockets are not HTTP
    /// connections any more, so the HTTP drain does not see them).
    private let webSocketEndpoints: [WebSocketEndpoint]
    private let syncEndpoint: WebSocketEndpoint
    /// The admitted sync sessions: the cap, their credentials and the re-check of API keys.
    private let syncSessions: SyncSessionRegistry
    /// Replication with the upstream BigPeer, when configured.
    public let upstream: UpstreamReplicator?
    /// LAN TCP peer links (`--lan`), when configured, and their mDNS advertisement.
    private let lan: LANPeerListener?
    private let advertiser: LANAdvertiser?
    /// BLE peer links (`--ble`), when configured and Bluetooth is there, and their advertisement
    /// through BlueZ, when BlueZ is there.
    private let ble: BLEPeerListener?
    private let bleAdvertising: BLEAdvertising?
    /// Links with the other nodes of the sync group found on the LAN (`--lan`, advertising).
    public let mesh: LANMesh?
    /// The connection policy every incoming link passes (the sync endpoint now; LAN and BLE
    /// links ask the same one), and the task re-reading its file.
    let connectionPolicy: SyncConnectionPolicy
    private let policyWatch: Task<Void, Never>?
    /// JWT verification (`--jwks`, `--jwt-secret-file`) and authentication webhooks: their
    /// fetches and HTTP clients stop with the service.
    private let verifiers: CredentialVerifiers
    /// The presence graph this instance gossips and serves (`GET /api/v4/presence`).
    let presence: PresenceHub
    private let logger: Logger
    /// Turns `/readyz` to 503 when `stop` begins.
    let drain: DrainFlag
    /// The abuse limits and the audit log around REST routes and sync handshakes (nil: nothing
    /// to limit or audit); its counts are in the metrics.
    let abuse: AbuseGuard?

    private init(configuration: ServerConfiguration, group: EventLoopGroup, database: Database, pool: PostgresPool,
                 store: DocumentStore, attachments: AttachmentStore, http: HTTPServer, listener: PostgresListener,
                 follower: Task<Void, Never>, syncEndpoint: WebSocketEndpoint, syncSessions: SyncSessionRegistry, webSocketEndpoints: [WebSocketEndpoint],
                 upstream: UpstreamReplicator?, lan: LANPeerListener?, advertiser: LANAdvertiser?, ble: BLEPeerListener?, bleAdvertising: BLEAdvertising?, mesh: LANMesh?,
                 connectionPolicy: SyncConnectionPolicy, policyWatch: Task<Void, Never>?, verifiers: CredentialVerifiers, presence: PresenceHub,
                 drain: DrainFlag, abuse: AbuseGuard?, logger: Logger) {
        self.verifiers = verifiers
        self.abuse = abuse
        self.drain = drain
        self.upstream = upstream
        self.presence = presence
        self.lan = lan
        self.advertiser = advertiser
        self.ble = ble
        self.bleAdvertising = bleAdvertising
        self.mesh = mesh
        self.connectionPolicy = connectionPolicy
        self.policyWatch = policyWatch
        self.maintenance = configuration.maintenanceInterval > .zero
            ? Task { await MaintenanceSchedule.run(store, every: configuration.maintenanceInterval, logger: logger) } : nil
        self.webSocketEndpoints = webSocketEndpoints
        self.syncEndpoint = syncEndpoint
        self.syncSessions = syncSessions
        self.listener = listener
        self.follower = follower
        self.configuration = configuration
        self.group = group
        self.database = database
        self.pool = pool
        self.store = store
        self.attachments = attachments
        self.http = http
        self.logger = logger
    }

    public static func start(_ configuration: ServerConfiguration, logger: Logger = Logger(label: "bigpeer")) async throws -> BigPeerService {
        let openAPI = try OpenAPIRoute.load()  // before anything starts: a bad BIGPEER_OPENAPI stops nothing
        let policyRules = try SyncConnectionPolicy.loadRules(configuration)  // a bad --peer-policy file too
        let verifiers = try await configuration.startCredentialVerification(logger: logger)  // and a bad --jwks file
        let group: EventLoopGroup
        do {
            group = try EventLoopGroup(threads: configuration.threads, yieldsAfterEachBatch: configuration.loopsYieldAfterEachBatch)
        } catch {
            await verifiers.shutdown()
            throw error
        }
        let policy: PeerPolicy
        do {
            policy = PeerPolicy(ruleFile: policyRules, webhook: try SyncConnectionPolicy.makeWebhook(configuration, group: group))
        } catch {
            await verifiers.shutdown()
            group.shutdown()
            throw error
        }
        let database: Database
        do {
            database = try await Database.open(configuration.database, migrationsDirectory: configuration.migrationsDirectory,
                                               loop: group.next(), logger: logger)
        } catch {
            await policy.shutdown()
            await verifiers.shutdown()
            group.shutdown()
            throw error
        }
        var poolConfig = PostgresPool.Configuration()
        poolConfig.maxConnections = configuration.databaseConnections
        // Statements that run longer fail with SQLSTATE 57014, which the API reports as 408.
        // JIT off: our statements are short, and PostgreSQL's estimates for the one-row counter
        // table joined LATERAL with the change log pass jit_above_cost, so every change-feed read
        // paid ~200 ms of LLVM compilation for a sub-millisecond query (fan-out latency).
        var sessionConfig = database.configuration
        let options = "-c statement_timeout=\(configuration.statementTimeout.components.seconds * 1000) -c jit=off"
        sessionConfig["options"] = sessionConfig["options"].map { "\($0) \(options)" } ?? options
        let pool = PostgresPool(sessionConfig, configuration: poolConfig, group: group)

        let store: DocumentStore
        let listener: PostgresListener
        let listenerLoop = group.next()
        do {
            var readLimits = ReadLimits()
            readLimits.maxBufferedResultBytes = configuration.maxBufferedResultBytes
            readLimits.maxConcurrentStreams = configuration.maxConcurrentStreamedResults ?? max(1, configuration.databaseConnections / 4)
            store = try await DocumentStore.open(pool: pool, readCacheBytes: configuration.readCacheBytes, readLimits: readLimits,
                                               statementTimeout: configuration.statementTimeout)
            // LISTEN before reading the head, so no commit falls between the two unnoticed.
            listener = try await PostgresListener(sessionConfig, channels: [ChangeFeed.channel], loop: listenerLoop)
            try await store.changeFeed.start()
        } catch {
            await pool.shutdown()
            try? database.localCluster?.stop()
            await policy.shutdown()
            await verifiers.shutdown()
            group.shutdown()
            throw error
        }
        // The feed runs on the listener's loop: a notification then wakes no other thread, and
        // the change-log read uses a pooled session of that loop (no hop per round trip). On the
        // shared cooperative pool every commit cost several thread switches (docs/performance-history.md).
        let follower = Task(executorPreference: listenerLoop) { await store.changeFeed.follow(listener) }
        // What a start that fails from here on releases, in this order.
        func releaseOnFailure(_ upstream: UpstreamReplicator?, _ mesh: LANMesh? = nil) async {
            await mesh?.stop()
            await upstream?.stop()
            follower.cancel()
            await listener.stop()
            await pool.shutdown()
            try? database.localCluster?.stop()
            await policy.shutdown()
            await verifiers.shutdown()
            group.shutdown()
        }

        let auth: Authenticator
        if configuration.insecureDevelopment {
            logger.critical("""
                AUTHENTICATION IS DISABLED (--insecure-dev): every request may read and write every \
                collection without a key. Never run this way where anyone else can reach the port.
                """)
            auth = .insecureDevelopment()
        } else {
            auth = Authenticator(keys: APIKeyStore(pool: pool), tokens: verifiers.tokens, webhook: verifiers.webhook, cacheTTL: configuration.authCacheTTL)
        }
        var upstream: UpstreamReplicator?
        if let upstreamConfiguration = configuration.upstream {
            do {
                upstream = try UpstreamReplicator(store: store, configuration: upstreamConfiguration, lockSession: sessionConfig, logger: logger)
            } catch {
                await releaseOnFailure(nil)
                throw error
            }
            logger.notice("replicating with the upstream", metadata: ["upstream": "\(upstreamConfiguration.displayURL)",
                                                                       "subscriptions": "\(upstreamConfiguration.subscriptions.count)"])
        }
        var router = HTTPRouter()
        let drain = DrainFlag()
        HealthRoutes(pool: pool, drain: drain).register(on: &router)  // no auth: load balancers call these
        StoreRoutes(store: store, auth: auth, logger: logger).register(on: &router)
        LegacyRoutes(store: store, auth: auth, logger: logger).register(on: &router)
        let attachments = AttachmentStore(pool: pool)
        AttachmentRoutes(store: attachments, documents: store, auth: auth, maxBytes: configuration.maxAttachmentBytes, logger: logger).register(on: &router)
        // What presence, the LAN mesh and the BLE advertisement call this node.
        let deviceName = configuration.lan?.deviceName ?? LANAdvertiser.hostName()
        let presence = PresenceHub(peerKey: PresenceHub.peerKey(site: store.siteID.rawValue),
                                   local: PresenceGossip.LocalInfo(deviceName: deviceName, isConnectedToBigPeer: true))
        PresenceRoute(hub: presence, auth: auth, logger: logger).register(on: &router)
        presence.start()
        if let upstream { presence.carry(upstream) }
        var mesh: LANMesh?
        if let lanConfiguration = configuration.lan, let meshConfiguration = lanConfiguration.mesh {
            let rule = LANLinkRule(peerKey: LANAdvertisement.siteKey(store.siteID.rawValue), syncGroup: lanConfiguration.syncGroup,
                                   protocolVersion: SyncProtocol.version, role: .node)
            do {
                mesh = try LANMesh(configuration: meshConfiguration, rule: rule, store: store, lockSession: sessionConfig,
                                   deviceName: deviceName, presence: presence, logger: logger)
            } catch {
                await presence.stop()
                await releaseOnFailure(upstream)
                throw error
            }
        }
        UpstreamRoutes(replicator: upstream, mesh: mesh, store: store, auth: auth, logger: logger).register(on: &router)
        openAPI.register(on: &router)
        var webSocketEndpoints: [WebSocketEndpoint] = []
        var syncSession = SyncSession.Configuration(serverSite: store.siteID.rawValue, sessionID: Self.instanceTag())
        syncSession.heartbeatMillis = UInt64(configuration.syncHeartbeat.components.seconds * 1000)
        if policy.webhook != nil {
            // The webhook's whole timeout, and the credentials check before it, fit in the handshake.
            syncSession.authenticationTimeoutMillis = UInt64(max(0, configuration.connectionWebhookTimeout / .milliseconds(1))) + 5_000
        }
        var syncRoute = SyncRoute(store: store,
                                  authentication: SyncAuthentication(keys: auth),
                                  session: syncSession, limits: configuration.syncWebSocket
                                      ?? SyncRoute.webSocketLimits(syncSession.limits, incomingBytes: configuration.maxBufferedRequestBytes),
                                  maxSessions: configuration.maxSyncSessions, logger: logger)
        syncRoute.credentialRecheck = configuration.syncCredentialRecheck
        syncRoute.maxSessionsPerPrincipal = configuration.maxSyncSessionsPerKey
        let connectionPolicy = SyncConnectionPolicy(policy: policy, logger: logger)
        if !policy.isEmpty { syncRoute.policy = connectionPolicy }
        syncRoute.presence = presence
        presence.shareThroughDatabase(store, instance: syncSession.sessionID, logger: logger)
        let relayUpstream = upstream?.configuration.relaySubscriptions == true ? upstream : nil
        if relayUpstream != nil || mesh != nil {
            let relayMesh = mesh
            syncRoute.relay = SubscriptionRelay { union in
                relayUpstream?.relay(union)
                relayMesh?.relay(union)
            }
        }
        let abuse = AbuseGuard.make(configuration, shares: configuration.insecureDevelopment ? nil : auth, logger: logger)
        syncRoute.abuse = abuse
        let (syncEndpoint, syncSessions) = syncRoute.register(on: &router)
        RemoteExecuteRoute(registry: syncSessions, presence: presence, auth: auth, timeout: configuration.remoteQueryTimeout, logger: logger)
            .register(on: &router)
        webSocketEndpoints.append(syncEndpoint)
        if configuration.enableEcho {
            logger.critical("""
                UNAUTHENTICATED WEBSOCKET ECHO ENABLED (--enable-echo): anyone who can reach the port may open \
                WebSockets on \(EchoRoute.path) and have messages of up to \(configuration.echoLimits.maxMessageSize >> 20) MiB \
                echoed, without an API key. It is a conformance and benchmark tool; never enable it in production.
                """)
            webSocketEndpoints.append(EchoRoute(limits: configuration.echoLimits).register(on: &router))
        }

        router.wrapHandlers { _, path, handler in AbuseGuard.guards(path) ? EvaluationTenant.tagging(handler) : handler }
        if let abuse {
            router.wrapHandlers { method, path, handler in
                AbuseGuard.guards(path) ? abuse.guarding(handler, route: "\(method) \(path)") : handler
            }
        }

        var httpConfig = HTTPServerConfiguration()
        httpConfig.host = configuration.host
        httpConfig.port = configuration.port
        httpConfig.threads = configuration.threads
        httpConfig.tls = configuration.tls
        httpConfig.limits.maxBodyBytes = configuration.maxBodyBytes
        httpConfig.maxBufferedRequestBytes = configuration.maxBufferedRequestBytes
        httpConfig.accessLog = configuration.accessLog
        let http: HTTPServer
        do {
            http = try HTTPServer(configuration: httpConfig, router: router, logger: logger, group: group)
            try await http.start()
        } catch {
            await releaseOnFailure(upstream, mesh)
            throw error
        }
        let policyWatch = connectionPolicy.watch(every: configuration.peerPolicyPollInterval)
        if let rules = policyRules {
            logger.notice("connection policy in force", metadata: ["file": "\(rules.path)", "rules": "\(rules.current.rules.count)"])
        }
        let scheme = configuration.tls == nil ? "http" : "https"
        logger.notice("BigPeer is listening", metadata: [
            "url": "\(scheme)://\(configuration.host):\(http.localPort ?? configuration.port)",
            "threads": "\(configuration.threads)",
        ])
        var lan: LANPeerListener?
        var advertiser: LANAdvertiser?
        /// Undoes what started when a later part cannot.
        func abandon() async {
            await advertiser?.stop()
            await lan?.stop()
            await http.shutdown(deadline: .zero)
            await releaseOnFailure(upstream, mesh)
        }
        if let lanConfiguration = configuration.lan {
            do {
                let tls = try lanConfiguration.tls ? configuration.tls.map { try TLSContext(serverCertificatePath: $0.certificatePath, privateKeyPath: $0.privateKeyPath) } : nil
                let listener = try await LANPeerListener.start(host: lanConfiguration.host, port: lanConfiguration.port, tls: tls, route: syncRoute,
                                                               registry: syncSessions, group: group)
                lan = listener
                if lanConfiguration.advertise {
                    let started = try await LANAdvertiser.start(lanConfiguration, port: listener.port, site: store.siteID.rawValue, logger: logger)
                    advertiser = started
                    try await mesh?.browse(on: started.daemon)
                }
            } catch {
                await abandon()
                throw error
            }
            logger.notice("accepting LAN peer links", metadata: [
                "address": "\(lanConfiguration.tls ? "tls" : "tcp")://\(lanConfiguration.host):\(lan?.port ?? lanConfiguration.port)"])
        }
        let ble: BLEPeerListener?
        do {
            ble = try await BLEPeerListener.startIfAvailable(configuration.ble, maxMessageSize: syncRoute.session.limits.maxMessageSize, route: syncRoute,
                                                             registry: syncSessions, group: group, logger: logger)
        } catch {
            await abandon()
            throw error
        }
        var bleAdvertising: BLEAdvertising?
        if let bleConfiguration = configuration.ble, let ble {
            bleAdvertising = await BLEAdvertising.startIfAvailable(bleConfiguration, listenerPSM: ble.psm, deviceName: deviceName, loop: group.loops[0],
                                                                   logger: logger)
        }
        return BigPeerService(configuration: configuration, group: group, database: database, pool: pool, store: store, attachments: attachments,
                              http: http, listener: listener, follower: follower,
                              syncEndpoint: syncEndpoint, syncSessions: syncSessions, webSocketEndpoints: webSocketEndpoints,
                              upstream: upstream, lan: lan, advertiser: advertiser, ble: ble, bleAdvertising: bleAdvertising, mesh: mesh, connectionPolicy: connectionPolicy, policyWatch: policyWatch, verifiers: verifiers,
                              presence: presence, drain: drain, abuse: abuse, logger: logger)
    }

    /// A random prefix for this instance's session ids, so log lines of different instances differ.
    static func instanceTag() -> String {
        var rng = SystemRandomNumberGenerator()
        return "s" + String(rng.next() as UInt32, radix: 36)
    }

    /// Sync WebSockets open on this instance now.
    public var syncConnections: Int { syncEndpoint.openConnections }

    /// Bytes of incoming sync messages being received now, over every sync WebSocket.
    public var syncIncomingMessageBytes: Int { syncEndpoint.configuration.messageBudget?.heldBytes ?? 0 }

    /// Sync sessions admitted now (credentials accepted, counted against `maxSyncSessions`).
    public var syncSessionCount: Int { syncSessions.admittedCount }

    /// Per open sync session: bytes waiting for its socket now and the most there ever were
    /// (bounded by the session's queue limit, whatever credit the peer granted).
    public var syncQueueStatistics: [(queued: Int, peak: Int)] { syncSessions.queueStatistics() }

    /// The port actually bound (differs from the configuration when it asked for port 0).
    public var port: Int { http.localPort ?? configuration.port }

    /// The LAN peer-link port actually bound (nil without `--lan`).
    public var lanPort: Int? { lan?.port }

    /// The PSM BLE peers connect to (the kernel's pick; what advertising publishes); nil without
    /// BLE or on the test stand-in.
    public var blePSM: UInt16? { ble?.psm }
    /// Whether BLE links are accepted (false with `--ble` where there is no Bluetooth).
    public var acceptsBLE: Bool { ble != nil }
    /// The PSM registered with BlueZ for advertising; nil when the node is not advertised
    /// (no `--ble`, no Bluetooth, no BlueZ, advertising ended).
    public var bleAdvertisedPSM: UInt16? { bleAdvertising?.advertisedPSM }

    public func stop() async {
        drain.start()
        logger.notice("shutting down: draining requests", metadata: ["grace": "\(configuration.shutdownGrace)"])
        for endpoint in webSocketEndpoints where endpoint.openConnections > 0 {
            await endpoint.closeAll(.goingAway, reason: "server shutting down", deadline: .seconds(2))
        }
        await advertiser?.stop()  // goodbyes first: peers stop dialling what is going away
        await bleAdvertising?.stop()
        await lan?.stop()
        await ble?.stop()
        await mesh?.stop()  // links this node dials say `bye`; their merges in flight commit
        await http.shutdown(deadline: configuration.shutdownGrace)
        // After the HTTP drain (writes acknowledged by then are in the change log, and the next
        // start uploads them), before the pool: merges in flight commit first.
        await upstream?.stop()
        syncSessions.stopMonitor()
        policyWatch?.cancel()
        await connectionPolicy.policy.shutdown()
        await verifiers.shutdown()
        await presence.stop()
        follower.cancel()
        maintenance?.cancel()
        await maintenance?.value
        await listener.stop()
        await pool.shutdown()
        // `pg_ctl -w stop` blocks for as long as PostgreSQL takes to shut down: on a thread of its
        // own, not on one of the cooperative threads (as many as cores) the process still needs.
        if let cluster = database.localCluster {
            let failure = await BlockingCall.run { () -> String? in
                do { try cluster.stop(); return nil } catch { return "\(error)" }
            }
            if let failure { logger.error("could not stop the local PostgreSQL", metadata: ["error": "\(failure)"]) }
        }
        // Joining the loop threads stays here: a caller whose task prefers one of these loops must
        // not be resumed onto a loop that has stopped meanwhile.
        group.shutdown()
        logger.notice("stopped")
    }
}
