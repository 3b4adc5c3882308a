/// A token-bucket rate: `perSecond` tokens are regained each second, at most `burst` are held.
public struct TokenBucketRate: Sendable, Hashable, CustomStringConvertible {
    public let perSecond: Double
    public let burst: Double

    /// Nil unless both are positive and finite (a rate of 0 would refuse forever).
    public init?(perSecond: Double, burst: Double) {
        guard perSecond > 0, burst >= 1, perSecond.isFinite, burst.isFinite else { return nil }
        self.perSecond = perSecond
        self.burst = burst
    }

    /// `RATE:BURST` (tokens per second, bucket size; `RATE` alone: a burst of one second's worth,
    /// at least 1), as the `bigpeer serve` options take it.
    public init?(parsing text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let rate = Double(parts[0]) else { return nil }
        let burst = parts.count == 2 ? Double(parts[1]) : max(1, rate.rounded(.up))
        guard let burst else { return nil }
        self.init(perSecond: rate, burst: burst)
    }

    public var description: String { "\(perSecond)/s, burst \(burst)" }
}

/// One bucket: the tokens it held when last touched, refilled lazily from the elapsed time, so an
/// idle bucket costs nothing and a request costs a subtraction.
struct TokenBucket: Sendable {
    /// The rate it fills at: its table's, or its credential's own (an API key's share of the
    /// server's time), so that a check needs no lookup of the credential's rate.
    var rate: TokenBucketRate
    private(set) var tokens: Double
    private var updated: ContinuousClock.Instant
    /// Refusals since the bucket last allowed something (the audit log writes the 1st, 2nd, 4th, …).
    private(set) var refusedInARow: UInt32 = 0

    init(full rate: TokenBucketRate, now: ContinuousClock.Instant) {
        self.rate = rate
        tokens = rate.burst
        updated = now
    }

    mutating func refill(now: ContinuousClock.Instant) {
        guard now > updated else { return }
        tokens = min(rate.burst, tokens + Self.seconds(now - updated) * rate.perSecond)
        updated = now
    }

    /// How long until one token is there; nil when one is there now. (A nanosecond's worth of
    /// rounding in the refills counts as there: waiting exactly `Retry-After` must be enough.)
    func wait() -> Duration? {
        let missing = 1 - tokens
        return missing * 1e9 <= rate.perSecond ? nil : .nanoseconds(Int64((missing / rate.perSecond * 1e9).rounded(.up)))
    }

    /// Takes one token if there is one (nil), else counts the refusal and says how long to wait.
    mutating func take(now: ContinuousClock.Instant) -> Duration? {
        refill(now: now)
        if let wait = wait() {
            refusedInARow &+= 1
            return wait
        }
        tokens -= 1
        refusedInARow = 0
        return nil
    }

    /// Takes `amount` tokens (one request; or seconds of server time) whether or not they are
    /// there, down to `-burst`: a charge for work already done (requests checked before their
    /// credentials were known, or their cost was, charged after).
    mutating func charge(now: ContinuousClock.Instant, amount: Double = 1) {
        refill(now: now)
        tokens = max(-rate.burst, tokens - amount)
    }

    /// Counts a refusal made without taking (a `peek` that found the bucket empty).
    mutating func noteRefusal() { refusedInARow &+= 1 }

    /// A `peek` found a token: the next refusal starts a new run.
    mutating func noteAllowed() { refusedInARow = 0 }

    static func seconds(_ d: Duration) -> Double {
        let c = d.components
        return Double(c.seconds) + Double(c.attoseconds) * 1e-18
    }
}
