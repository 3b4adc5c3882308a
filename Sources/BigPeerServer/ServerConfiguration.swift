import Auth
import HTTP
import Logging
import Sockets
import Upstream
import WebSocket

/// Everything `bigpeer serve` can be told, with production defaults.
public struct ServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// Event-loop threads shared by HTTP, WebSocket and PostgreSQL sessions (default: one per core).
    public var threads = EventLoopGroup.defaultThreadCount
    /// Loop threads offer the CPU after each batch of events (`EventLoop.yieldsAfterEachBatch`):
    /// lower tail latency when the cores are shared (with PostgreSQL, say); off for A/B tests.
    public var loopsYieldAfterEachBatch = true
    public var database: DatabaseSource = .local(dataDirectory: "./.bigpeer")
    public var migrationsDirectory: String?
    public var tls: HTTPServerConfiguration.TLS?
    /// PostgreSQL sessions this instance may hold.
    public var databaseConnections = 32
    /// Memory for documents kept to answer point reads by `_id` without a database round trip
    /// (`DocumentReadCache`; 0 turns it off). Kept correct by the change feed.
    public var readCacheBytes = 128 << 20
    /// Largest request body accepted (413 above it). Documents are limited to 5 MiB each; a bulk
    /// INSERT of many documents in one request needs more.
    public var maxBodyBytes = 32 << 20
    /// Request content held in memory at once across all connections (`HTTPServerConfiguration.
    /// maxBufferedRequestBytes`, charged as content arrives): past it a request gets 503. Without a bound every
    /// connection could hold a body of `maxBodyBytes` at once. The same amount again bounds the
    /// sync messages being received over all sync WebSockets (`WebSocketConfiguration.messageBudget`; 1013).
    public var maxBufferedRequestBytes = 1 << 30
    /// Most stored-JSON bytes of documents one read may hold when its result cannot be streamed
    /// (ORDER BY, GROUP BY, aggregates or DISTINCT done in memory; CBOR responses); past it the
    /// statement fails with 400. Results that can stream are not limited (docs/API.md, "Large results").
    public var maxBufferedResultBytes = 64 << 20
    /// Large results streamed at once (each holds a database session while its client reads);
    /// past it such reads get 503 + Retry-After. nil: a quarter of `databaseConnections` (at least 1).
    public var maxConcurrentStreamedResults: Int?
    /// Largest attachment accepted by `POST /api/v4/attachments/upload` (413 above it). Uploads
    /// stream to the database, so this bounds storage per attachment, not server memory.
    public var maxAttachmentBytes = 64 << 20
    /// Longest a single database statement may run (408 to the client after that).
    public var statementTimeout: Duration = .seconds(30)
    /// How often this instance runs maintenance (tombstone reaping, change-log pruning:
    /// `DocumentStore.runMaintenance`); one instance at a time does it. Zero turns it off here.
    public var maintenanceInterval: Duration = .seconds(600)
    /// How long in-flight requests may run on shutdown before connections are closed.
    public var shutdownGrace: Duration = .seconds(10)

    /// `--insecure-dev`: no API keys are checked (a loud warning is logged at start).
    public var insecureDevelopment = false
    /// How long a verified API key is trusted without rereading `api_keys`: a revocation takes
    /// effect on every instance within this period.
    public var authCacheTTL: Duration = .seconds(5)

    /// `--enable-echo`: serve the WebSocket echo endpoint `GET /api/v4/_echo` (Autobahn
    /// conformance runs and benchmarks). It is **unauthenticated** — the Autobahn testsuite cannot
    /// send an API key — so it is off by default and logged loudly when on.
    public var enableEcho = false
    /// Limits of the echo endpoint (default: large enough for Autobahn section 9).
    public var echoLimits: WebSocketConfiguration = .echo

    /// Accepts REST requests and sync peers presenting an HS256 JWT signed with this secret (`--jwt-secret-file`,
    /// `BIGPEER_JWT_SECRET`); nil: only API keys are accepted.
    public var jwt: JWTVerifier?
    /// `--jwks PATH|URL`: accepts JWTs (RS256, ES256, EdDSA; REST and sync) verified with the keys
    /// of this JWKS and checked by `jwtRules`. A file that cannot be loaded stops the start; a URL
    /// is retried in the background meanwhile (`startTokenVerification`).
    public var jwks: JWKSSource.Configuration?
    /// Issuer, audience and leeway the claims of `jwks`-verified tokens must satisfy
    /// (`--jwt-issuer`, `--jwt-audience`, `--jwt-leeway`; `jwt` carries its own).
    public var jwtRules = JWTClaimRules()
    /// Verified JWTs remembered by their SHA-256, so a repeated token skips the signature check
    /// (`TokenVerifier`); 0: none.
    public var maxCachedTokens = 4096
    /// `--auth-webhook NAME=URL` (and `--auth-webhook-database-id`): providers whose tokens their
    /// webhook judges (Ditto's contract, docs/AUTH.md), on REST (`X-Auth-Provider`) and sync.
    public var authWebhook: AuthWebhook.Configuration?
    /// Sync sessions this instance admits at once (`--max-sync-sessions`): a peer beyond it is
    /// refused with 4003 after its credentials check. Each costs ~15 KB idle and at most about
    /// 1 MiB of queued output (a peer that stops reading). Sockets still in their handshake get
    /// a quarter more room (at least 64); beyond that, upgrades get 503.
    public var maxSyncSessions = 10_000
    /// Where the HTTP access log goes (`--access-log`, `--log-format`).
    public var accessLog = HTTPServerConfiguration.AccessLog.logger
    /// Sync sessions one identity (an API key, a JWT subject) may hold at once; nil: no cap below
    /// `maxSyncSessions` (a fleet of devices often shares one key).
    public var maxSyncSessionsPerKey: Int?
    /// Rate limits per client address and per credential, failed-authentication throttling
    /// (docs/AUTH.md, "Abuse limits"): only the throttling is on by default.
    public var abuseLimits = AbuseLimits()
    /// Which auth decisions the audit log (`bigpeer.audit`) records (`--audit-log`).
    public var auditLog: AuditLogMode = .denials
    /// Where audit lines go; nil: `Logger(label: "bigpeer.audit")` (tests pass their own).
    public var auditLogger: Logger?
    /// How often the API keys of open sync sessions are verified again: with `authCacheTTL`, a
    /// revoked key ends its sessions within `authCacheTTL` (as it stops REST requests).
    public var syncCredentialRecheck: Duration = .seconds(1)
    /// Sync heartbeat interval announced in `welcome` (a silent peer is closed after twice this).
    public var syncHeartbeat: Duration = .seconds(20)
    /// How long `POST /api/v4/sync/remote_execute` waits for the peers' answers (`--remote-query-timeout`).
    public var remoteQueryTimeout: Duration = .seconds(10)
    /// WebSocket limits of the sync endpoint (nil: `SyncRoute.webSocketLimits`, sized for the
    /// protocol's largest message). Tests lower the queue cap and stall timeout.
    public var syncWebSocket: WebSocketConfiguration?
    /// `--peer-policy FILE`: allow/deny rules every sync peer passes once its credentials check
    /// out (docs/LOCAL-NODE.md, "Connection policy"). A bad file stops the start; the file is
    /// read again when it changes (a bad new version is logged and the previous rules stay).
    public var peerPolicyFile: String?
    /// How often the policy file is looked at for a change.
    public var peerPolicyPollInterval: Duration = .seconds(1)
    /// `--connection-webhook URL`: asked about every sync peer no rule of the policy file decides.
    public var connectionWebhook: String?
    /// How long the webhook may take to answer; no answer by then denies the peer.
    public var connectionWebhookTimeout: Duration = .seconds(10)
    /// Replicate with an upstream BigPeer (a local node and its cloud: docs/LOCAL-NODE.md).
    public var upstream: UpstreamConfiguration?
    /// Accept LAN TCP peer links (`--lan`); nil: none.
    public var lan: LANConfiguration?
    /// Accept BLE L2CAP peer links (`--ble`); nil: none.
    public var ble: BLEConfiguration?

    public init() {}
}
