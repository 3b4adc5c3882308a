import Metrics
import Testing

@Suite struct ExpositionWriterTests {
    static let counter = MetricFamily("t_requests_total", .counter, "Requests.\nSecond line with \\ backslash.", labels: ["route"])
    static let histogram = MetricFamily("t_duration_seconds", .histogram, "Durations.")

    @Test func labelValuesAndHelpAreEscaped() throws {
        var w = ExpositionWriter(families: [Self.counter])
        w.sample(Self.counter, labels: ["a\"b\\c\nd"], UInt64(3))
        let text = w.render()
        #expect(text.contains(#"# HELP t_requests_total Requests.\nSecond line with \\ backslash."#))
        #expect(text.contains("# TYPE t_requests_total counter\n"))
        #expect(text.contains(#"t_requests_total{route="a\"b\\c\nd"} 3"#))
        let parsed = try Exposition.parse(text)
        #expect(parsed.samples.first?.labels["route"] == "a\"b\\c\nd")
    }

    @Test func histogramBucketsAreCumulativeAndInfEqualsCount() throws {
        let h = Histogram(.seconds([0.001, 0.01, 0.1]))
        for ns: UInt64 in [500_000, 1_000_000, 5_000_000, 50_000_000, 2_000_000_000] { h.observe(ns) }
        var counts: [UInt64] = []
        let sum = h.cells.accumulate(series: 0, into: &counts)
        var w = ExpositionWriter(families: [Self.histogram])
        w.histogram(Self.histogram, buckets: h.cells.buckets, counts: counts, sum: sum)
        let parsed = try Exposition.parse(w.render())
        let buckets = parsed.samples.filter { $0.name == "t_duration_seconds_bucket" }.map { ($0.labels["le"] ?? "", $0.value) }
        #expect(buckets.map(\.0) == ["0.001", "0.01", "0.1", "+Inf"])
        #expect(buckets.map(\.1) == [2, 3, 4, 5])  // `le` is inclusive: 1 ms falls in the first bucket
        #expect(parsed.value("t_duration_seconds_count") == 5)
        #expect(abs((parsed.value("t_duration_seconds_sum") ?? 0) - 2.0565) < 1e-9)
        try parsed.check()
    }

    @Test func ownedAndSharedAddsCount() {
        let cells = MetricCells(count: 2)
        for _ in 0..<10 { cells.addOwned(0); cells.add(1, 2) }
        #expect(cells.load(0) == 10 && cells.load(1) == 20)
        let g = Gauge()
        g.add(5); g.add(-7)
        #expect(g.value == -2)
    }
}
