import CAtomicCounters

/// A fixed array of 64-bit cells, allocated once and updated with relaxed atomics: the storage
/// behind every counter, gauge and histogram. Recording is one atomic add on a cell, no lock, no
/// allocation; a scrape loads the cells from any thread.
public final class MetricCells: @unchecked Sendable {
    // Sendable: `base` is allocated and zeroed in init and freed in deinit; in between every
    // access is a relaxed atomic operation from CAtomicCounters, so readers and writers on any
    // threads never race on a cell.
    private let base: UnsafeMutablePointer<UInt64>
    public let count: Int

    public init(count: Int) {
        self.count = count
        base = .allocate(capacity: max(count, 1))
        base.initialize(repeating: 0, count: max(count, 1))
    }

    deinit { base.deallocate() }

    /// Adds from any thread (one locked add).
    @inline(__always) public func add(_ index: Int, _ value: UInt64 = 1) {
        assert(index >= 0 && index < count)
        bp_cell_add(base + index, value)
    }

    /// Adds from the one thread that ever writes this cell (a loop's own shard): no locked
    /// instruction. Two writers would lose updates, so a cell is either owned or shared, never both.
    @inline(__always) public func addOwned(_ index: Int, _ value: UInt64 = 1) {
        assert(index >= 0 && index < count)
        bp_cell_add_owned(base + index, value)
    }

    @inline(__always) public func store(_ index: Int, _ value: UInt64) {
        assert(index >= 0 && index < count)
        bp_cell_store(base + index, value)
    }

    @inline(__always) public func load(_ index: Int) -> UInt64 {
        assert(index >= 0 && index < count)
        return bp_cell_load(base + index)
    }
}

/// A monotonically increasing count (one cell).
public struct Counter: Sendable {
    private let cells = MetricCells(count: 1)
    public init() {}
    @inline(__always) public func add(_ value: UInt64 = 1) { cells.add(0, value) }
    public var value: UInt64 { cells.load(0) }
}

/// A value that goes up and down (one cell, two's complement).
public struct Gauge: Sendable {
    private let cells = MetricCells(count: 1)
    public init() {}
    @inline(__always) public func add(_ delta: Int64) { cells.add(0, UInt64(bitPattern: delta)) }
    public func set(_ value: Int64) { cells.store(0, UInt64(bitPattern: value)) }
    public var value: Int64 { Int64(bitPattern: cells.load(0)) }
}

/// Upper bounds of a histogram's buckets, kept in integer units (nanoseconds for durations, items
/// for sizes) so an observation is an integer compare and add; `unitsPerValue` converts to the
/// exposed unit (1e9: seconds).
public struct HistogramBuckets: Sendable, Equatable {
    public let bounds: [UInt64]
    public let unitsPerValue: Double

    public init(bounds: [UInt64], unitsPerValue: Double = 1) {
        precondition(zip(bounds, bounds.dropFirst()).allSatisfy { $0 < $1 }, "histogram bounds must increase")
        self.bounds = bounds
        self.unitsPerValue = unitsPerValue
    }

    /// Durations in seconds, observed in nanoseconds.
    public static func seconds(_ bounds: [Double]) -> HistogramBuckets {
        HistogramBuckets(bounds: bounds.map { UInt64(($0 * 1e9).rounded()) }, unitsPerValue: 1e9)
    }

    /// From 100 µs to 10 s: request, acquire and commit latencies.
    public static let latency = seconds([0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10])

    /// Cells per series: one per bound, the `+Inf` bucket, the sum.
    public var cellsPerSeries: Int { bounds.count + 2 }

    /// The bucket an observation falls in (`value <= bound`), or `bounds.count` for `+Inf`.
    @inline(__always) func bucket(of value: UInt64) -> Int {
        var i = 0
        while i < bounds.count && value > bounds[i] { i += 1 }
        return i
    }
}

/// Many histogram series with the same buckets in one block of cells: series `s` owns cells
/// `s * cellsPerSeries ..< (s + 1) * cellsPerSeries` (bucket counts, not cumulative, then the sum).
/// The count is the buckets' total, computed at scrape, so `+Inf` always equals `_count`.
public struct HistogramCells: Sendable {
    public let buckets: HistogramBuckets
    public let series: Int
    let cells: MetricCells

    public init(buckets: HistogramBuckets, series: Int) {
        self.buckets = buckets
        self.series = series
        cells = MetricCells(count: buckets.cellsPerSeries * series)
    }

    @inline(__always) public func observe(series s: Int, _ value: UInt64) {
        let base = s * buckets.cellsPerSeries
        cells.add(base + buckets.bucket(of: value))
        cells.add(base + buckets.bounds.count + 1, value)
    }

    /// `observe` for a block only one thread writes.
    @inline(__always) public func observeOwned(series s: Int, _ value: UInt64) {
        let base = s * buckets.cellsPerSeries
        cells.addOwned(base + buckets.bucket(of: value))
        cells.addOwned(base + buckets.bounds.count + 1, value)
    }

    /// Adds series `s` into `counts` (per bucket, not cumulative, `+Inf` last) and returns its sum
    /// in units: how a scrape sums a family's shards.
    public func accumulate(series s: Int, into counts: inout [UInt64]) -> UInt64 {
        let base = s * buckets.cellsPerSeries
        if counts.count != buckets.bounds.count + 1 { counts = Array(repeating: 0, count: buckets.bounds.count + 1) }
        for i in 0...buckets.bounds.count { counts[i] &+= cells.load(base + i) }
        return cells.load(base + buckets.bounds.count + 1)
    }
}

/// One histogram series (a pool's acquire time, a batcher's commit time).
public struct Histogram: Sendable {
    public let cells: HistogramCells
    public init(_ buckets: HistogramBuckets) { cells = HistogramCells(buckets: buckets, series: 1) }
    @inline(__always) public func observe(_ value: UInt64) { cells.observe(series: 0, value) }
    @inline(__always) public func observe(_ duration: Duration) {
        let (s, a) = duration.components
        observe(UInt64(max(0, s)) &* 1_000_000_000 &+ UInt64(max(0, a / 1_000_000_000)))
    }
}
