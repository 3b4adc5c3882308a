import ArgumentParser
import Auth
import BigPeerServer
import ConnectionPolicy
import Upstream
import Dispatch
import Glibc
import HTTP
import Logging
import Postgres
import Sockets

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the server (starts a private PostgreSQL when no database URL is given).")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks a free one).") var port = 8080
    @Option(help: "Event-loop threads (default: one per core).") var threads: Int?
    @Flag(name: .customLong("no-loop-yield"), help: "Event loops do not offer the CPU after each batch of events (for comparisons; see docs/HTTP.md).") var noLoopYield = false
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain: serve HTTPS.") var tlsCertificate: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key for --tls-cert.") var tlsKey: String?
    @Option(name: .customLong("db-connections"), help: "PostgreSQL sessions this instance may hold.") var databaseConnections = 32
    @Option(name: .customLong("read-cache-mb"), help: "Memory for documents cached to answer point reads by _id (0: off).")
    var readCacheMegabytes = 128
    @Option(name: .customLong("maintenance-interval"), help: "Seconds between maintenance runs (reaping tombstones past TOMBSTONE_TTL_DAYS, pruning the change log past CHANGE_LOG_RETENTION_DAYS); 0: never on this instance.")
    var maintenanceIntervalSeconds = 600
    @Option(name: .customLong("max-body-bytes"), help: "Largest request body accepted (413 above).") var maxBodyBytes = 32 << 20
    @Option(name: .customLong("max-buffered-request-bytes"),
            help: "Request content held in memory at once across all connections (charged as it arrives; at least --max-body-bytes); a request whose content would go past it gets 503. The same amount again bounds the sync messages being received over all sync WebSockets (1013 past it).")
    var maxBufferedRequestBytes = 1 << 30
    @Option(name: .customLong("statement-timeout"), help: "Seconds a statement may run in PostgreSQL, and again in memory (filtering, sorting, grouping), before it fails with 408.")
    var statementTimeoutSeconds = 30
    @Flag(name: .customLong("insecure-dev"), help: "Development only: accept every request without an API key (logged loudly at start).")
    var insecureDevelopment = false
    @Option(name: .customLong("max-buffered-result-bytes"), help: "Most document bytes one read may hold when its result cannot stream (in-memory ORDER BY, GROUP BY, DISTINCT; CBOR responses); 400 above.")
    var maxBufferedResultBytes = 64 << 20
    @Option(name: .customLong("max-streamed-results"), help: "Large results streamed at once, each holding a database session while its client reads (503 above); default: a quarter of --db-connections.")
    var maxStreamedResults: Int?
    @Option(name: .customLong("max-attachment-bytes"), help: "Largest attachment upload accepted (413 above).") var maxAttachmentBytes = 64 << 20
    @Option(name: .customLong("max-sync-sessions"), help: "Sync sessions admitted at once; a peer beyond it is refused with close code 4003 (docs/PROTOCOL.md §4.2).")
    var maxSyncSessions = ServerConfiguration().maxSyncSessions
    @Option(name: .customLong("max-sync-sessions-per-key"), help: "Sync sessions one API key or JWT subject may hold at once (default: no cap below --max-sync-sessions); beyond, close code 4003.")
    var maxSyncSessionsPerKey: Int?
    @Option(name: .customLong("peer-policy"), help: "JSON file of allow/deny rules every sync peer passes (docs/LOCAL-NODE.md, \"Connection policy\"); read again when it changes.")
    var peerPolicy: String?
    @Option(name: .customLong("connection-webhook"), help: "URL POSTed a description of each sync peer no --peer-policy rule decides; its answer allows or denies (no answer within 10 s denies).")
    var connectionWebhook: String?
    @Option(name: .customLong("log-level"), help: "trace, debug, info (default; logs every request), notice, warning, error or critical.")
    var logLevel: Logger.Level = .info
    @Option(name: .customLong("log-format"), help: "text (default: time level label : key=value [source] message) or json (one object per line; docs/OPERATIONS.md).")
    var logFormat: BufferedStderrLogHandler.Format = .text
    @Option(name: .customLong("access-log"), help: "on (default: one line per HTTP request at info, buffered and written off the event loops) or off.")
    var accessLog: Switch = .on
    @Option(name: .customLong("metrics-port"), help: "Serve GET /metrics (Prometheus text format) on this port of --metrics-host; the public port never serves it. Default: no metrics endpoint.")
    var metricsPort: Int?
    @Option(name: .customLong("metrics-host"), help: "Address for --metrics-port (default loopback; 0.0.0.0 lets a Prometheus on another host scrape it).")
    var metricsHost = "127.0.0.1"
    @Flag(name: .customLong("enable-echo"), help: "Serve the UNAUTHENTICATED WebSocket echo endpoint GET /api/v4/_echo (Autobahn conformance and benchmarks only).")
    var enableEcho = false
    @OptionGroup var lan: LANOptions
    @OptionGroup var ble: BLEOptions
    @OptionGroup var jwt: JWTOptions
    @Option(name: .customLong("jwks"), help: "JWKS file or http(s) URL with the public keys of RS256/ES256/EdDSA JWTs (default: $BIGPEER_JWKS). Re-read on an unknown kid and by age (file: 2 s, URL: 10 min); an unreadable file stops the start, an unreachable URL is retried (JWTs get 503 meanwhile).")
    var jwks: String?
    @Option(name: .customLong("auth-webhook"), help: "NAME=URL: an authentication provider whose webhook (Ditto's contract, docs/AUTH.md) judges its tokens: sync {provider, token}, REST Bearer + X-Auth-Provider: NAME (repeatable).")
    var authWebhooks: [String] = []
    @Option(name: .customLong("auth-webhook-database-id"), help: "Sent to the authentication webhooks as databaseID.")
    var authWebhookDatabaseID: String?
    @OptionGroup var abuse: AbuseOptions
    @OptionGroup var database: DatabaseOptions
    @Option(name: .customLong("upstream"), help: "Replicate with this upstream BigPeer (ws[s]://HOST:PORT/api/v4/sync): this server becomes a local node of it (docs/LOCAL-NODE.md).")
    var upstream: String?
    @Option(name: .customLong("upstream-key"), help: "API key for --upstream (default: $BIGPEER_UPSTREAM_KEY).") var upstreamKey: String?
    @Option(name: .customLong("upstream-jwt-file"), help: "File holding a JWT for --upstream; read again when it changes, when the upstream says the token expires soon (renew), and every 30 s, so it can be renewed in place.")
    var upstreamJWTFile: String?
    @Option(name: .customLong("upstream-subscribe"), help: "A SELECT * FROM collection [WHERE ...] to download from --upstream (repeatable).")
    var upstreamSubscriptions: [String] = []
    @Flag(name: .customLong("upstream-relay-subscriptions"), help: "Also download from --upstream what this server's own sync peers subscribe to.")
    var upstreamRelaySubscriptions = false
    @Option(name: .customLong("upstream-relay-linger"), help: "With --upstream-relay-subscriptions: seconds a relayed subscription stays upstream after the last local peer holding it goes (a peer that reconnects meanwhile needs no new download).")
    var upstreamRelayLingerSeconds = 30
    @Option(name: .customLong("upstream-batch-documents"), help: "Changes per upload message to --upstream (1...10000).")
    var upstreamBatchDocuments = 1000
    @Option(name: .customLong("upstream-retry-max"), help: "Longest wait, in seconds, between attempts to reach --upstream (exponential backoff with jitter up to it).")
    var upstreamRetryMaxSeconds = 30
    @Option(name: .customLong("remote-query-timeout"), help: "Seconds POST /api/v4/sync/remote_execute waits for the peers' answers (1...300); a peer that has not answered by then gets an error in the result.")
    var remoteQueryTimeoutSeconds = 10

    func validate() throws {
        if upstream == nil && (upstreamKey != nil || upstreamJWTFile != nil || !upstreamSubscriptions.isEmpty || upstreamRelaySubscriptions) {
            throw ValidationError("--upstream-key, --upstream-jwt-file, --upstream-subscribe and --upstream-relay-subscriptions need --upstream")
        }
        if upstreamKey != nil && upstreamJWTFile != nil { throw ValidationError("--upstream-key and --upstream-jwt-file exclude each other") }
        if !(1...10_000).contains(upstreamBatchDocuments) { throw ValidationError("--upstream-batch-documents must be 1...10000") }
        if !(0...86_400).contains(upstreamRelayLingerSeconds) { throw ValidationError("--upstream-relay-linger must be 0...86400 seconds") }
        if !(1...86_400).contains(upstreamRetryMaxSeconds) { throw ValidationError("--upstream-retry-max must be 1...86400 seconds") }
        if !(1...300).contains(remoteQueryTimeoutSeconds) { throw ValidationError("--remote-query-timeout must be 1...300 seconds") }
        if (tlsCertificate == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if !(0...65535).contains(port) { throw ValidationError("--port must be 0...65535") }
        if maxAttachmentBytes < 0 || maxAttachmentBytes > 1 << 40 { throw ValidationError("--max-attachment-bytes must be 0...1 TiB") }
        if !(1...1_000_000).contains(maxSyncSessions) { throw ValidationError("--max-sync-sessions must be 1...1000000") }
        if let n = maxSyncSessionsPerKey, !(1...1_000_000).contains(n) { throw ValidationError("--max-sync-sessions-per-key must be 1...1000000") }
        if let metricsPort, !(0...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be 0...65535") }
    }

    func run() async throws {
        let level = logLevel
        let format = logFormat
        // Lines are written off the event loops (the access log runs on them at `info`).
        LoggingSystem.bootstrap({ label, provider in
            var handler = BufferedStderrLogHandler(label: label, format: format)
            // Audit lines are written at notice (refusals) and info (allowances, with --audit-log all).
            handler.logLevel = label == "bigpeer.audit" ? min(level, .info) : level
            handler.metadataProvider = provider
            return handler
        }, metadataProvider: .requestID)
        defer { LogSink.standardError.flush() }
        let logger = Logger(label: "bigpeer")
        for warning in LayeredCommandLine.takeWarnings() { logger.warning("\(warning)") }
        var config = ServerConfiguration()
        config.host = host
        config.port = port
        if let threads { config.threads = max(1, threads) }
        config.loopsYieldAfterEachBatch = !noLoopYield
        config.database = DatabaseSource.resolve(databaseURL: database.databaseURL, dataDirectory: database.dataDirectory)
        config.migrationsDirectory = database.migrationsDirectory
        config.databaseConnections = databaseConnections
        guard readCacheMegabytes >= 0 && readCacheMegabytes <= 1 << 20 else {
            throw ValidationError("--read-cache-mb must be between 0 and 1048576")
        }
        config.readCacheBytes = readCacheMegabytes << 20
        config.maxBodyBytes = maxBodyBytes
        guard maxBufferedRequestBytes >= maxBodyBytes else {
            throw ValidationError("--max-buffered-request-bytes must be at least --max-body-bytes (a request of the largest size must fit)")
        }
        config.maxBufferedRequestBytes = maxBufferedRequestBytes
        guard maxBufferedResultBytes > 0 else { throw ValidationError("--max-buffered-result-bytes must be positive") }
        config.maxBufferedResultBytes = maxBufferedResultBytes
        if let maxStreamedResults {
            guard maxStreamedResults > 0 else { throw ValidationError("--max-streamed-results must be positive") }
            config.maxConcurrentStreamedResults = maxStreamedResults
        }
        config.statementTimeout = .seconds(max(1, statementTimeoutSeconds))
        config.maintenanceInterval = .seconds(max(0, maintenanceIntervalSeconds))
        config.remoteQueryTimeout = .seconds(remoteQueryTimeoutSeconds)
        config.insecureDevelopment = insecureDevelopment
        config.maxAttachmentBytes = maxAttachmentBytes
        config.enableEcho = enableEcho
        config.maxSyncSessions = maxSyncSessions
        config.maxSyncSessionsPerKey = maxSyncSessionsPerKey
        config.peerPolicyFile = peerPolicy
        config.connectionWebhook = connectionWebhook
        try abuse.apply(to: &config)
        config.accessLog = accessLog == .on && logLevel <= .info ? .buffered(.logSink(format: logFormat)) : .off
        do {
            config.jwt = try jwt.verifier()
        } catch {
            throw CleanExit.message("error: \(error)")
        }
        if let location = jwks ?? getenv("BIGPEER_JWKS").map({ String(cString: $0) }), !location.isEmpty {
            config.jwks = JWKSSource.Configuration(location: JWKSSource.Location(location))
        }
        config.jwtRules = jwt.rules
        if !authWebhooks.isEmpty {
            var providers: [String: String] = [:]
            for entry in authWebhooks {
                guard let equals = entry.firstIndex(of: "="), equals != entry.startIndex else {
                    throw ValidationError("--auth-webhook takes NAME=URL, not \(entry)")
                }
                let name = String(entry[..<equals])
                guard providers.updateValue(String(entry[entry.index(after: equals)...]), forKey: name) == nil else {
                    throw ValidationError("--auth-webhook names provider \(name) twice")
                }
            }
            var webhook = AuthWebhook.Configuration(providers: providers)
            webhook.databaseID = authWebhookDatabaseID
            config.authWebhook = webhook
        }
        if let tlsCertificate, let tlsKey { config.tls = .init(certificatePath: tlsCertificate, privateKeyPath: tlsKey) }
        if let upstream {
            let key = upstreamKey ?? getenv("BIGPEER_UPSTREAM_KEY").map { String(cString: $0) }
            var u = UpstreamConfiguration(url: upstream, credentials: upstreamJWTFile.map { .jwtFile($0) } ?? key.map { .apiKey($0) })
            u.subscriptions = upstreamSubscriptions
            u.relaySubscriptions = upstreamRelaySubscriptions
            u.relayLinger = .seconds(upstreamRelayLingerSeconds)
            u.uploadBatchDocuments = upstreamBatchDocuments
            u.reconnectMax = .seconds(upstreamRetryMaxSeconds)
            if case .jwtFile(let path)? = u.credentials, FileBytes.read(path, maxBytes: 16 << 10) == nil {
                throw ValidationError("cannot read --upstream-jwt-file \(path)")
            }
            config.upstream = u
        }
        config.lan = try lan.configuration(serverHasTLS: config.tls != nil)
        config.ble = ble.configuration()

        let signals = SignalWaiter([SIGINT, SIGTERM])
        let service: BigPeerService
        do {
            service = try await BigPeerService.start(config, logger: logger)
        } catch let e as PostgresError {
            throw CleanExit.message("error: \(e.debugDescription)")
        } catch let e as PolicyConfigurationError {
            // A bad policy must not look like a clean exit to a supervisor: status 1.
            let line = Array("error: connection policy: \(e)\n".utf8)
            _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode.failure
        } catch let e as AuthWebhookError {
            let line = Array("error: \(e)\n".utf8)
            _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode.failure
        } catch let e as JWKError {
            let line = Array("error: --jwks: \(e)\n".utf8)
            _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode.failure
        }
        var metricsServer: HTTPServer?
        if let metricsPort {
            let registry = ServiceMetrics.registry(for: service)
            do {
                metricsServer = try await MetricsEndpoint.start(registry: registry, host: metricsHost, port: metricsPort, group: service.group, logger: logger)
            } catch {
                await service.stop()
                throw CleanExit.message("error: cannot serve --metrics-port \(metricsPort): \(error)")
            }
        }
        let systemd = SystemdNotifier()
        systemd?.notify("READY=1\nSTATUS=serving on \(host):\(service.port)")
        let signal = await signals.next()
        logger.notice("received signal \(signal)")
        systemd?.notify("STOPPING=1\nSTATUS=draining")
        await metricsServer?.shutdown(deadline: .seconds(1))
        await service.stop()
    }
}

/// Turns SIGINT/SIGTERM into an awaitable event (the default action would kill the process
/// without stopping the private PostgreSQL or draining requests).
final class SignalWaiter: Sendable {
    private let stream: AsyncStream<Int32>
    // Written once in init and never touched again: the sources only need to stay alive.
    nonisolated(unsafe) private let sources: [any DispatchSourceSignal]

    init(_ signals: [Int32]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        self.stream = stream
        var sources: [any DispatchSourceSignal] = []
        for s in signals {
            Glibc.signal(s, SIG_IGN)
            let src = DispatchSource.makeSignalSource(signal: s, queue: .global())
            src.setEventHandler { continuation.yield(s) }
            src.resume()
            sources.append(src)
        }
        self.sources = sources
    }

    func next() async -> Int32 {
        var it = stream.makeAsyncIterator()
        return await it.next() ?? SIGTERM
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
extension BufferedStderrLogHandler.Format: ExpressibleByArgument {}

/// An `on|off` option value.
enum Switch: String, CaseIterable, ExpressibleByArgument { case on, off }
