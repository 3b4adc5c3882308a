import Auth
import DQL
import HTTP
import Logging
import Metrics
import Postgres
import Sockets
import Store
import SyncProtocol
import Synchronization
import Upstream

/// The metrics of one BigPeer instance beyond its HTTP server's: declared here, read at scrape
/// time from the state their owners already keep (pool, sync registry, change feed, read cache,
/// upstream replicator), plus the histograms the pool and the write batcher record into.
public enum ServiceMetrics {
    static let syncConnections = MetricFamily("bigpeer_sync_connections", .gauge, "Open sync WebSocket connections.")
    static let syncSessions = MetricFamily("bigpeer_sync_sessions", .gauge, "Admitted sync sessions (every link type).")
    static let syncQueuedBytes = MetricFamily("bigpeer_sync_queued_bytes", .gauge, "Bytes waiting to be sent to sync peers, summed over sessions.")
    static let syncIncomingBytes = MetricFamily("bigpeer_sync_incoming_message_bytes", .gauge,
                                                "Bytes of messages being received from sync peers over WebSocket (at most --max-buffered-request-bytes; past it 1013).")
    static let poolOpen = MetricFamily("bigpeer_db_pool_connections", .gauge, "PostgreSQL sessions the pool holds (idle, leased or connecting).")
    static let poolIdle = MetricFamily("bigpeer_db_pool_idle_connections", .gauge, "PostgreSQL sessions idle in the pool.")
    static let poolMax = MetricFamily("bigpeer_db_pool_max_connections", .gauge, "Most PostgreSQL sessions the pool may hold (--db-connections).")
    static let poolWaiters = MetricFamily("bigpeer_db_pool_waiters", .gauge, "Callers waiting for a PostgreSQL session.")
    static let poolAcquire = MetricFamily("bigpeer_db_pool_acquire_seconds", .histogram, "Time to lease a PostgreSQL session from the pool.")
    static let changeLogHead = MetricFamily("bigpeer_change_log_head", .gauge, "Newest change-log transaction the change feed has read.")
    static let changeFeedLag = MetricFamily("bigpeer_change_feed_lag_transactions", .gauge, "Transactions announced by NOTIFY that the change feed has not read yet.")
    static let changeFeedReads = MetricFamily("bigpeer_change_feed_reads_total", .counter, "Change-log reads the change feed started.")
    static let writeBatch = MetricFamily("bigpeer_write_batch_statements", .histogram, "Write statements per committed transaction (group commit).")
    static let writeTransaction = MetricFamily("bigpeer_write_transaction_seconds", .histogram, "Time from a write batch's BEGIN to its COMMIT's answer.")
    static let readCacheHits = MetricFamily("bigpeer_read_cache_hits_total", .counter, "Point reads answered from the read cache.")
    static let readCacheMisses = MetricFamily("bigpeer_read_cache_misses_total", .counter, "Point reads the read cache could not answer.")
    static let readCacheEntries = MetricFamily("bigpeer_read_cache_entries", .gauge, "Documents in the read cache.")
    static let readCacheBytes = MetricFamily("bigpeer_read_cache_bytes", .gauge, "Bytes of documents in the read cache.")
    static let inMemoryStages = MetricFamily("bigpeer_in_memory_stages_total", .counter,
                                             "In-memory evaluation stages (WHERE, sort, decoding of results) by where they finished: inline on an event loop, or moved to the evaluation threads because they needed more than a loop's slice.",
                                             labels: ["where"])
    static let evaluationQueued = MetricFamily("bigpeer_evaluation_queued_stages", .gauge,
                                               "In-memory evaluation stages waiting for an evaluation thread.")
    static let evaluationTenants = MetricFamily("bigpeer_evaluation_queued_tenants", .gauge,
                                                "Tenants (credentials, client addresses, sync sessions) with stages waiting for an evaluation thread; the threads take turns between them.")
    static let limited = MetricFamily("bigpeer_requests_limited_total", .counter,
                                      "REST requests (429) and sync handshakes (4003) refused by an abuse limit, by limit: address, credential, credential_server_time, failed_authentication.",
                                      labels: ["limit"])
    static let serverTimeWaiting = MetricFamily("bigpeer_server_time_waiting_requests", .gauge,
                                                "REST requests waiting for their credential's share of the server's time (--time-limit-credential, keys create --time-limit).")
    static let serverTimeWaited = MetricFamily("bigpeer_server_time_waited_requests_total", .counter,
                                               "REST requests that waited for their credential's share of the server's time and then ran.")
    static let upstreamConnected = MetricFamily("bigpeer_upstream_connected", .gauge, "1 while a session with --upstream is up, else 0 (local node only).")
    static let upstreamSessions = MetricFamily("bigpeer_upstream_sessions_total", .counter, "Sessions opened with --upstream.")
    static let upstreamUploadLag = MetricFamily("bigpeer_upstream_upload_lag_transactions", .gauge, "Change-log transactions not yet uploaded to --upstream.")
    static let upstreamChanges = MetricFamily("bigpeer_upstream_changes_total", .counter, "Changes exchanged with --upstream, by direction (upload, download).", labels: ["direction"])
    static let upstreamBytes = MetricFamily("bigpeer_upstream_bytes_total", .counter, "Bytes exchanged with --upstream, by direction (upload, download).", labels: ["direction"])

    public static let families = [
        syncConnections, syncSessions, syncQueuedBytes, syncIncomingBytes, poolOpen, poolIdle, poolMax, poolWaiters, poolAcquire,
        changeLogHead, changeFeedLag, changeFeedReads, writeBatch, writeTransaction,
        readCacheHits, readCacheMisses, readCacheEntries, readCacheBytes, inMemoryStages, evaluationQueued, evaluationTenants,
        limited, serverTimeWaiting, serverTimeWaited, upstreamConnected, upstreamSessions, upstreamUploadLag, upstreamChanges, upstreamBytes,
    ]

    /// Everything a `bigpeer serve` exposes, in exposition order: what `bigpeer metrics list`
    /// prints and docs/OPERATIONS.md tabulates.
    public static let all = HTTPMetrics.families + families + ProcessMetrics.families

    /// A registry with every family of `service` (its HTTP server, its own state, the process).
    public static func registry(for service: BigPeerService) -> MetricsRegistry {
        let registry = MetricsRegistry()
        service.http.registerMetrics(on: registry)
        registry.register(families) { w in collect(service, into: &w) }
        ProcessMetrics.register(on: registry)
        return registry
    }

    private static func collect(_ service: BigPeerService, into w: inout ExpositionWriter) {
        w.sample(syncConnections, service.syncConnections)
        w.sample(syncSessions, service.syncSessionCount)
        w.sample(syncQueuedBytes, service.syncQueueStatistics.reduce(0) { $0 + $1.queued })
        w.sample(syncIncomingBytes, service.syncIncomingMessageBytes)
        let pool = service.pool
        w.sample(poolOpen, pool.openConnections)
        w.sample(poolIdle, pool.idleConnections)
        w.sample(poolMax, pool.configuration.maxConnections)
        w.sample(poolWaiters, pool.waitingCount)
        histogram(poolAcquire, pool.acquireTime, into: &w)
        let store = service.store
        let head = store.changeFeed.head
        w.sample(changeLogHead, Int(head))
        w.sample(changeFeedLag, Int(max(0, store.changeFeed.notifiedHead - head)))
        w.sample(changeFeedReads, store.changeFeed.reads)
        histogram(writeBatch, store.writeBatchSizes, into: &w)
        histogram(writeTransaction, store.writeTransactionTime, into: &w)
        let cache = store.readCache.statistics
        w.sample(readCacheHits, cache.hits)
        w.sample(readCacheMisses, cache.misses)
        w.sample(readCacheEntries, cache.entries)
        w.sample(readCacheBytes, cache.bytes)
        w.sample(inMemoryStages, labels: ["inline"], InMemoryEvaluation.stagesInline.load(ordering: .relaxed))
        w.sample(inMemoryStages, labels: ["off_loop"], InMemoryEvaluation.stagesMovedOffLoop.load(ordering: .relaxed))
        let queued = InMemoryEvaluation.queued
        w.sample(evaluationQueued, queued.stages)
        w.sample(evaluationTenants, queued.tenants)
        let abuse = service.abuse?.statistics ?? (refused: [:], waiting: 0, waited: 0)
        for (limit, label) in [(RateLimited.Limit.address, "address"), (.credential, "credential"), (.credentialServerTime, "credential_server_time"),
                               (.failedAuthentication, "failed_authentication")] {
            w.sample(limited, labels: [label], abuse.refused[limit, default: 0])
        }
        w.sample(serverTimeWaiting, abuse.waiting)
        w.sample(serverTimeWaited, abuse.waited)
        if let upstream = service.upstream {
            let status = upstream.status
            w.sample(upstreamConnected, status.state == .connected ? 1 : 0)
            w.sample(upstreamSessions, status.sessions)
            w.sample(upstreamUploadLag, Int(max(0, head - status.uploadedThrough.txn)))
            w.sample(upstreamChanges, labels: ["upload"], status.uploadedChanges)
            w.sample(upstreamChanges, labels: ["download"], status.downloadedEntries)
            w.sample(upstreamBytes, labels: ["upload"], status.uploadedBytes)
            w.sample(upstreamBytes, labels: ["download"], status.downloadedBytes)
        }
    }

    private static func histogram(_ family: MetricFamily, _ histogram: Histogram, into w: inout ExpositionWriter) {
        var counts: [UInt64] = []
        let sum = histogram.cells.accumulate(series: 0, into: &counts)
        w.histogram(family, buckets: histogram.cells.buckets, counts: counts, sum: sum)
    }
}

/// `GET /metrics` on its own listener (`--metrics-port`), never on the public port: the
/// exposition tells whoever reads it the routes, the load and the database's state, so it is
/// served only where the operator put it (loopback by default) and needs no API key there.
public enum MetricsEndpoint {
    public static func start(registry: MetricsRegistry, host: String, port: Int, group: EventLoopGroup, logger: Logger) async throws -> HTTPServer {
        var router = HTTPRouter()
        router.get("/metrics", .immediate { _ in
            HTTPResponse(contentType: MetricsRegistry.contentType, body: Array(registry.exposition().utf8))
        })
        var configuration = HTTPServerConfiguration()
        configuration.host = host
        configuration.port = port
        configuration.threads = 1
        let server = try HTTPServer(configuration: configuration, router: router, logger: logger, group: group)
        try await server.start()
        return server
    }
}
