import Glibc

/// Nanoseconds on CLOCK_MONOTONIC: deadlines and timers never jump with the wall clock.
public struct NanoTime: Comparable, Hashable, Sendable {
    public var nanoseconds: UInt64

    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }

    public static func now() -> NanoTime {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return NanoTime(nanoseconds: UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec))
    }

    public static func < (a: NanoTime, b: NanoTime) -> Bool { a.nanoseconds < b.nanoseconds }

    public func adding(_ d: Duration) -> NanoTime {
        let (s, atto) = d.components
        let ns = Int64(s) &* 1_000_000_000 &+ atto / 1_000_000_000
        return ns >= 0
            ? NanoTime(nanoseconds: nanoseconds &+ UInt64(ns))
            : NanoTime(nanoseconds: nanoseconds &- min(nanoseconds, UInt64(-ns)))
    }

    public func duration(since earlier: NanoTime) -> Duration {
        .nanoseconds(Int64(nanoseconds) - Int64(earlier.nanoseconds))
    }
}
