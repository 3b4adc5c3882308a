/// A monotonic clock that moves only when a test says so: pass `now` where code takes a
/// `() -> ContinuousClock.Instant`, then `advance` instead of sleeping.
public final class SteppedClock: Sendable {
    private let start = ContinuousClock.now
    private let offset = MutexBox<Duration>(.zero)

    public init() {}

    public func now() -> ContinuousClock.Instant { start + offset.withLock { $0 } }

    public func advance(_ by: Duration) { offset.withLock { $0 += by } }
}
