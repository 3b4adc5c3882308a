import Synchronization

/// The metrics of one process or server: its owners register their declared families with a
/// collector that reads their cells and state at scrape time. Recording never touches the
/// registry (owners keep their own cells); only registration and scrapes take its lock.
public final class MetricsRegistry: Sendable {
    public typealias Collect = @Sendable (inout ExpositionWriter) -> Void

    private struct Entry {
        let families: [MetricFamily]
        let collect: Collect
    }

    private let entries = Mutex<[Entry]>([])

    public init() {}

    /// Adds a collector for `families`; every sample it writes must belong to one of them.
    public func register(_ families: [MetricFamily], collect: @escaping Collect) {
        entries.withLock { $0.append(Entry(families: families, collect: collect)) }
    }

    /// Every registered family, in registration order.
    public var families: [MetricFamily] { entries.withLock { $0.flatMap(\.families) } }

    /// The Prometheus text exposition of everything registered.
    public func exposition() -> String {
        let snapshot = entries.withLock { $0 }
        var writer = ExpositionWriter(families: snapshot.flatMap(\.families))
        for entry in snapshot { entry.collect(&writer) }
        return writer.render()
    }

    /// The `Content-Type` of `exposition()`.
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"
}
