import Metrics
import Sockets
import Synchronization

/// A server's request metrics, in one shard per event loop: a connection records into its own
/// loop's shard with plain (uncontended, unlocked) stores, and a scrape sums the shards. Labels
/// are the router's route patterns (`/api/v4/store/:collection`, never the raw path), the method
/// (the standard ones, else `other`) and the status class, so the series are bounded by the
/// routes, not by what clients send.
public final class HTTPMetrics: Sendable {
    public static let requests = MetricFamily("bigpeer_http_requests_total", .counter,
                                              "HTTP requests answered, by route pattern, method and status class (1xx…5xx).",
                                              labels: ["route", "method", "status"])
    public static let duration = MetricFamily("bigpeer_http_request_duration_seconds", .histogram,
                                              "Time from a request's complete arrival to its response head being queued (streamed bodies continue after it), by route pattern and method.",
                                              labels: ["route", "method"])
    public static let openConnections = MetricFamily("bigpeer_http_open_connections", .gauge, "Open HTTP connections (upgraded WebSockets are counted by their own metrics).")
    public static let receivedBytes = MetricFamily("bigpeer_http_received_bytes_total", .counter, "Bytes read from HTTP connections before any upgrade.")
    public static let sentBytes = MetricFamily("bigpeer_http_sent_bytes_total", .counter, "Bytes written to HTTP connections before any upgrade.")
    public static let bufferedRequestBytes = MetricFamily("bigpeer_http_buffered_request_bytes", .gauge,
                                                          "Request content held in memory now across all connections (what requests read whole before their handler runs have sent); at most --max-buffered-request-bytes.")
    public static let refusedForMemory = MetricFamily("bigpeer_http_requests_refused_for_memory_total", .counter,
                                                      "Requests refused with 503 because their content would have gone past --max-buffered-request-bytes.")
    public static let families = [requests, duration, openConnections, receivedBytes, sentBytes, bufferedRequestBytes, refusedForMemory]

    /// The label of requests no route matched (and requests refused before routing).
    public static let unmatchedRoute = "(unmatched)"
    static let methods: [HTTPMethod] = [.GET, .HEAD, .POST, .PUT, .PATCH, .DELETE, .OPTIONS]
    static let statusClasses = ["1xx", "2xx", "3xx", "4xx", "5xx"]

    /// Route patterns by route id; the last is `unmatchedRoute`.
    let routes: [String]
    let shards: [HTTPMetricsShard]

    init(routes: [String], loops: Int) {
        self.routes = routes + [Self.unmatchedRoute]
        shards = (0..<max(1, loops)).map { _ in HTTPMetricsShard(series: routes.count + 1) }
    }

    var unmatchedRouteID: Int { routes.count - 1 }

    func shard(for loop: EventLoop) -> HTTPMetricsShard { shards[loop.index % shards.count] }

    func collect(into w: inout ExpositionWriter, openConnections: Int, bufferedRequestBytes: Int, refusedForMemory: Int) {
        let methodNames = Self.methods.map(\.rawValue) + ["other"]
        for route in routes.indices {
            for method in methodNames.indices {
                let series = HTTPMetricsShard.series(route: route, method: method)
                var counts: [UInt64] = []
                var sum: UInt64 = 0
                for shard in shards { sum &+= shard.durations.accumulate(series: series, into: &counts) }
                guard counts.contains(where: { $0 > 0 }) else { continue }
                w.histogram(Self.duration, labels: [routes[route], methodNames[method]], buckets: shards[0].durations.buckets, counts: counts, sum: sum)
                for status in Self.statusClasses.indices {
                    let cell = HTTPMetricsShard.requestCell(series: series, statusClass: status)
                    let total = shards.reduce(0) { $0 &+ $1.requests.load(cell) }
                    if total > 0 { w.sample(Self.requests, labels: [routes[route], methodNames[method], Self.statusClasses[status]], total) }
                }
            }
        }
        w.sample(Self.openConnections, openConnections)
        w.sample(Self.receivedBytes, shards.reduce(0) { $0 &+ $1.bytes.load(0) })
        w.sample(Self.sentBytes, shards.reduce(0) { $0 &+ $1.bytes.load(1) })
        w.sample(Self.bufferedRequestBytes, bufferedRequestBytes)
        w.sample(Self.refusedForMemory, refusedForMemory)
    }
}

/// One loop's cells. Written only by that loop's thread (`…Owned` adds), read by scrapes.
final class HTTPMetricsShard: Sendable {
    static let methodCount = HTTPMetrics.methods.count + 1
    let requests: MetricCells
    let durations: HistogramCells
    /// Received, sent.
    let bytes = MetricCells(count: 2)

    init(series routes: Int) {
        requests = MetricCells(count: routes * Self.methodCount * HTTPMetrics.statusClasses.count)
        durations = HistogramCells(buckets: .latency, series: routes * Self.methodCount)
    }

    static func series(route: Int, method: Int) -> Int { route * methodCount + method }
    static func requestCell(series: Int, statusClass: Int) -> Int { series * HTTPMetrics.statusClasses.count + statusClass }

    @inline(__always) static func methodIndex(_ method: HTTPMethod) -> Int {
        // Interned methods compare as small strings; the common ones come first.
        for (i, m) in HTTPMetrics.methods.enumerated() where m == method { return i }
        return HTTPMetrics.methods.count
    }

    /// One answered request (on the owning loop).
    @inline(__always) func record(route: Int, method: HTTPMethod, status: Int, elapsedNanoseconds: UInt64) {
        let series = Self.series(route: route, method: Self.methodIndex(method))
        let statusClass = min(max(status / 100 - 1, 0), HTTPMetrics.statusClasses.count - 1)
        requests.addOwned(Self.requestCell(series: series, statusClass: statusClass))
        durations.observeOwned(series: series, elapsedNanoseconds)
    }
}
