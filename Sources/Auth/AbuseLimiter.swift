import Synchronization
import Values

/// The abuse limits of one server (docs/AUTH.md, "Abuse limits"): nil turns a limit off.
public struct AbuseLimits: Sendable {
    /// Requests (REST) and sync handshakes per client address (IPv4 address, IPv6 /64).
    public var perAddress: TokenBucketRate?
    /// Requests and sync handshakes per credential (API key id, `jwt:<sub>`).
    public var perCredential: TokenBucketRate?
    /// Server time per credential, in seconds a second (`burst`: seconds): what each REST request
    /// took from its route starting to its answer is charged after it answered, and while the
    /// bucket holds less than one second the credential's requests wait for it (up to
    /// `serverTimeWait`, the asynchronous routes) or get 429. A request count does
    /// not bound work: one per-document regex over 1,000 documents costs as much as thousands of
    /// point reads.
    public var serverTimePerCredential: TokenBucketRate?
    /// How long a request over its credential's server time may wait for it before it is refused
    /// (the REST routes that answer asynchronously, `/api/v4/store/execute` among them).
    public var serverTimeWait: Duration = .seconds(5)
    /// How many requests of one credential may wait so at once; the next ones get 429 at once.
    public var serverTimeMaxWaiting = 32
    /// Failed authentications per client address: `burst` failures, then one more each
    /// `1 / perSecond` seconds; while none is left, the address's requests get 429.
    public var failedAuthentication: TokenBucketRate? = Self.defaultFailedAuthentication
    /// Keys each of the three tables tracks at most (oldest replaced first).
    public var maxTrackedKeys = 65_536
    /// Monotonic time (tests pass a manual clock).
    public var clock: @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }

    /// 20 failures, then one every 10 s: a person who mistypes a key never meets it, a client
    /// looping on a stale key is slowed to 6 attempts a minute.
    public static let defaultFailedAuthentication = TokenBucketRate(perSecond: 0.1, burst: 20)

    public init() {}

    public var isEmpty: Bool { perAddress == nil && perCredential == nil && serverTimePerCredential == nil && failedAuthentication == nil }
}

/// A request refused by a limit, and when to try again (`Retry-After`).
public struct RateLimited: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Limit: String, Sendable, Hashable {
        case address = "address rate limit"
        case credential = "credential rate limit"
        case credentialServerTime = "credential server time limit"
        case failedAuthentication = "too many failed authentications"
    }
    public let limit: Limit
    public let retryAfter: Duration
    /// Refusals in a row by this limit for this key, this one included (1 for the first).
    public let refusedInARow: UInt32

    public init(limit: Limit, retryAfter: Duration, refusedInARow: UInt32) {
        self.limit = limit
        self.retryAfter = retryAfter
        self.refusedInARow = refusedInARow
    }

    /// Whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3 has no fractions).
    public var retryAfterSeconds: Int {
        max(1, Int(TokenBucket.seconds(retryAfter).rounded(.up)))
    }

    public var description: String {
        switch limit {
        case .address: "too many requests from this address; retry after \(retryAfterSeconds) s"
        case .credential: "too many requests with these credentials; retry after \(retryAfterSeconds) s"
        case .credentialServerTime: "these credentials used their share of the server's time; retry after \(retryAfterSeconds) s"
        case .failedAuthentication: "too many failed authentications from this address; retry after \(retryAfterSeconds) s"
        }
    }
}

/// Where credentials' own shares of the server's time come from: an API key created with
/// `keys create --time-limit` (`Authenticator`, from its cache of verified keys).
public protocol ServerTimeShares: Sendable {
    /// Whether any credential with a share of its own was seen: until then requests are neither
    /// timed nor checked for one (the common case costs nothing).
    var anyShares: Bool { get }
    /// A verified credential's own share; nil: the server's (`serverTimePerCredential`), if any.
    func serverTimeShare(credential: String) -> TokenBucketRate?
}

/// The token buckets of `AbuseLimits`: per address, per credential, failed authentications per
/// address, server time per credential. Each table is split into 16 shards, each a `Mutex` held
/// for one dictionary probe and a few arithmetic operations (a leaf lock), so requests on
/// different event loops rarely meet on one and never wait on anything slow. Each shard is a
/// `BoundedBucketTable` of `maxTrackedKeys / 16` keys: the memory is bounded whatever the clients
/// do, and every call is O(1).
public final class AbuseLimiter: Sendable {
    public let limits: AbuseLimits
    private let addresses: ShardedBuckets<ClientAddressKey>?
    // Credentials by their bytes: `jwt:<sub>` of two canonically equivalent subjects (NFC, NFD)
    // are two credentials, and neither may spend the other's bucket.
    private let credentials: ShardedBuckets<ExactString>?
    /// Server time, at the server's rate or a credential's own share (each bucket keeps its rate).
    private let credentialTime: ShardedBuckets<ExactString>?
    private let failures: ShardedBuckets<ClientAddressKey>?
    private let shares: (any ServerTimeShares)?

    public init(_ limits: AbuseLimits, shares: (any ServerTimeShares)? = nil) {
        self.limits = limits
        self.shares = shares
        let perShard = max(1, limits.maxTrackedKeys / ShardedBuckets<String>.shardCount)
        func table<K>(_ on: Bool) -> ShardedBuckets<K>? { on ? ShardedBuckets(capacityPerShard: perShard) : nil }
        addresses = table(limits.perAddress != nil)
        credentials = table(limits.perCredential != nil)
        credentialTime = table(limits.serverTimePerCredential != nil || shares != nil)
        failures = table(limits.failedAuthentication != nil)
    }

    /// Whether a credential limit (requests or server time) is on: REST requests are then checked
    /// with the identity they claim.
    public var limitsCredentials: Bool { credentials != nil || limitsCredentialServerTime }
    /// Whether requests' server time is charged to their credentials: the server's share is on,
    /// or a credential with a share of its own was seen.
    public var limitsCredentialServerTime: Bool { limits.serverTimePerCredential != nil || shares?.anyShares == true }
    /// Whether requests are timed at all: a server that checks API keys times every request (two
    /// clock reads), so that a key's first request, the one that loads its share, is charged too.
    public var timesRequests: Bool { credentialTime != nil }

    /// A request (or sync handshake) from `address` (nil: not an IP client, not limited): refused
    /// while the address has no failed authentication left, else takes a token of its bucket.
    public func admit(address: ClientAddressKey?) -> RateLimited? {
        guard let address else { return nil }
        let now = limits.clock()
        if let failures, let refusal = failures.peek(address, now: now, as: .failedAuthentication) { return refusal }
        guard let addresses, let rate = limits.perAddress else { return nil }
        return addresses.take(address, rate: rate, now: now, as: .address)
    }

    /// Whether `credential` may go on, without taking a token: REST requests are checked with the
    /// identity they claim and charged (`charge`) once it is verified, so that a forged id cannot
    /// use up someone else's bucket. (A key's server-time bucket holds the key's own share: a
    /// check needs no lookup.)
    public func check(credential: String) -> RateLimited? {
        let now = limits.clock(), key = ExactString(credential)
        return credentials?.peek(key, now: now, as: .credential)
            ?? credentialTime?.peek(key, now: now, as: .credentialServerTime)
    }

    /// Charges a verified credential one request (its bucket may go into debt, down to `-burst`)
    /// and `serverTime` (the same floor) at its own share, else the server's.
    public func charge(credential: String, serverTime: Duration? = nil) {
        let now = limits.clock(), key = ExactString(credential)
        if let credentials, let rate = limits.perCredential { credentials.charge(key, rate: rate, now: now) }
        guard let credentialTime, let serverTime else { return }
        let share = shares?.anyShares == true ? shares?.serverTimeShare(credential: credential) : nil
        guard let rate = share ?? limits.serverTimePerCredential else { return }
        credentialTime.charge(key, rate: rate, now: now, amount: TokenBucket.seconds(serverTime))
    }

    /// Takes a token of a verified credential's bucket (a sync handshake), or refuses.
    public func take(credential: String) -> RateLimited? {
        guard let credentials, let rate = limits.perCredential else { return nil }
        return credentials.take(ExactString(credential), rate: rate, now: limits.clock(), as: .credential)
    }

    /// A failed authentication from `address` (a wrong, unknown, malformed, expired or revoked
    /// credential). A success never gives one back: only time does, so an attacker holding one
    /// valid key cannot interleave it to keep guessing.
    public func recordFailedAuthentication(address: ClientAddressKey?) {
        guard let address, let failures, let rate = limits.failedAuthentication else { return }
        failures.charge(address, rate: rate, now: limits.clock())
    }

    /// Keys tracked now by each table (tests, metrics).
    public var trackedKeys: (addresses: Int, credentials: Int, failures: Int) {
        (addresses?.count ?? 0, (credentials?.count ?? 0) + (credentialTime?.count ?? 0), failures?.count ?? 0)
    }
}

/// One table of buckets, sharded by key hash. Each bucket keeps the rate it was made (or last
/// charged) with: the table's, or its credential's own.
final class ShardedBuckets<Key: Hashable & Sendable>: Sendable {
    static var shardCount: Int { 16 }
    private final class Shard: Sendable {
        let table: Mutex<BoundedBucketTable<Key>>
        init(capacity: Int) { table = Mutex(BoundedBucketTable(capacity: capacity)) }
    }
    private let shards: [Shard]

    init(capacityPerShard: Int) {
        shards = (0..<Self.shardCount).map { _ in Shard(capacity: capacityPerShard) }
    }

    private func shard(_ key: Key) -> Shard { shards[Int(UInt(bitPattern: key.hashValue) % UInt(Self.shardCount))] }

    func take(_ key: Key, rate: TokenBucketRate, now: ContinuousClock.Instant, as limit: RateLimited.Limit) -> RateLimited? {
        shard(key).table.withLock { t in
            t.withBucket(key, fresh: { TokenBucket(full: rate, now: now) }) { b in
                b.take(now: now).map { RateLimited(limit: limit, retryAfter: $0, refusedInARow: b.refusedInARow) }
            }
        }
    }

    /// Refused when `key` has a bucket without a whole token; a key never seen is allowed and
    /// gets no entry.
    func peek(_ key: Key, now: ContinuousClock.Instant, as limit: RateLimited.Limit) -> RateLimited? {
        shard(key).table.withLock { t in
            t.withExistingBucket(key) { b -> RateLimited? in
                b.refill(now: now)
                guard let wait = b.wait() else {
                    b.noteAllowed()
                    return nil
                }
                b.noteRefusal()
                return RateLimited(limit: limit, retryAfter: wait, refusedInARow: b.refusedInARow)
            } ?? nil
        }
    }

    /// Charges `amount` at `rate` (which becomes the bucket's: a credential's share can change
    /// when its key is loaded again).
    func charge(_ key: Key, rate: TokenBucketRate, now: ContinuousClock.Instant, amount: Double = 1) {
        shard(key).table.withLock { t in
            t.withBucket(key, fresh: { TokenBucket(full: rate, now: now) }) { b in
                if b.rate != rate {
                    b.refill(now: now)
                    b.rate = rate
                }
                b.charge(now: now, amount: amount)
            }
        }
    }

    var count: Int { shards.reduce(0) { $0 + $1.table.withLock { $0.count } } }
}
