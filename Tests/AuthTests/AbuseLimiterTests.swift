@testable import Auth
import BigPeerTestSupport
import Testing

/// `AbuseLimiter` and its parts on a stepped clock: buckets refuse past their burst and refill
/// with time, addresses are keyed by IPv4 address and IPv6 /64, tables stay bounded whatever keys
/// arrive, failed authentications block an address until time gives one back.
@Suite struct AbuseLimiterTests {
    static func limiter(_ clock: SteppedClock, _ configure: (inout AbuseLimits) -> Void) -> AbuseLimiter {
        var limits = AbuseLimits()
        limits.failedAuthentication = nil
        limits.clock = { clock.now() }
        configure(&limits)
        return AbuseLimiter(limits)
    }

    static func rate(_ perSecond: Double, _ burst: Double) -> TokenBucketRate {
        TokenBucketRate(perSecond: perSecond, burst: burst)!
    }

    static func address(_ text: String) throws -> ClientAddressKey { try #require(ClientAddressKey(remote: text)) }

    @Test func aBucketRefusesPastItsBurst_andRefillsWithTime() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.perAddress = Self.rate(2, 3) }
        let a = try Self.address("192.0.2.7:5000")
        for _ in 0..<3 { #expect(limiter.admit(address: a) == nil) }
        let refused = try #require(limiter.admit(address: a))
        #expect(refused.limit == .address)
        #expect(refused.retryAfter == .milliseconds(500))
        #expect(refused.retryAfterSeconds == 1)
        #expect(refused.refusedInARow == 1)
        #expect(limiter.admit(address: a)?.refusedInARow == 2)
        clock.advance(.milliseconds(250))
        #expect(limiter.admit(address: a) != nil, "half a token")
        clock.advance(.milliseconds(250))
        #expect(limiter.admit(address: a) == nil)
        #expect(limiter.admit(address: a) != nil)
        // A long pause gives back the burst, never more.
        clock.advance(.seconds(3600))
        for _ in 0..<3 { #expect(limiter.admit(address: a) == nil) }
        #expect(limiter.admit(address: a) != nil)
        // Another address has its own bucket; no address (a Bluetooth peer) is not limited.
        #expect(limiter.admit(address: try Self.address("192.0.2.8:5000")) == nil)
        #expect(limiter.admit(address: nil) == nil)
    }

    @Test func retryAfterIsWholeSecondsRoundedUp() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.perAddress = Self.rate(0.1, 1) }
        let a = try Self.address("10.0.0.1")
        #expect(limiter.admit(address: a) == nil)
        #expect(limiter.admit(address: a)?.retryAfterSeconds == 10)
        clock.advance(.milliseconds(500))
        #expect(limiter.admit(address: a)?.retryAfterSeconds == 10, "9.5 s rounds up")
        clock.advance(.milliseconds(8_600))
        #expect(limiter.admit(address: a)?.retryAfterSeconds == 1, "0.9 s is still 1")
    }

    @Test func addressKeys_IPv4ByAddress_IPv6ByItsSlash64() throws {
        #expect(try Self.address("192.0.2.7:5555") == Self.address("192.0.2.7"))
        #expect(try Self.address("192.0.2.7:5555") != Self.address("192.0.2.8:5555"))
        #expect(try Self.address("[2001:db8:1:2::1]:80") == Self.address("[2001:db8:1:2:ffff:ffff:ffff:ffff]:81"))
        #expect(try Self.address("[2001:db8:1:2::1]:80") != Self.address("[2001:db8:1:3::1]:80"))
        #expect(try Self.address("[::ffff:192.0.2.7]:9") == Self.address("192.0.2.7:1"), "IPv4-mapped is IPv4")
        #expect(try Self.address("[::1]:9") != Self.address("0.0.0.0:1"))
        #expect(try Self.address("[fe80::1%eth0]:1") == Self.address("[fe80::2]:2"))
        #expect(try Self.address("192.0.2.7").description == "192.0.2.7")
        #expect(try Self.address("[2001:db8:1:2::1]:80").description == "2001:db8:1:2::/64")
        for bad in ["-", "", "AA:BB:CC:DD:EE:FF", "1.2.3", "1.2.3.4.5", "1.2.3.256:1", "01234.1.1.1", "[zz::]:1", "[::1", "1..2.3"] {
            #expect(ClientAddressKey(remote: bad) == nil, "\(bad)")
        }

        // One /64 shares a bucket, whichever of its 2^64 addresses a request comes from.
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.perAddress = Self.rate(1, 2) }
        #expect(limiter.admit(address: try Self.address("[2001:db8:5:5::1]:1")) == nil)
        #expect(limiter.admit(address: try Self.address("[2001:db8:5:5::2]:1")) == nil)
        #expect(limiter.admit(address: try Self.address("[2001:db8:5:5:abcd::99]:1")) != nil)
        #expect(limiter.admit(address: try Self.address("[2001:db8:5:6::1]:1")) == nil, "the next /64 is someone else")
    }

    @Test func tablesStayBounded_whileAddressesAndIDsCycle() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) {
            $0.perAddress = Self.rate(1, 1)
            $0.perCredential = Self.rate(1, 1)
            $0.failedAuthentication = Self.rate(0.1, 3)
            $0.maxTrackedKeys = 64
        }
        for i in 0..<20_000 {
            let v6 = try #require(ClientAddressKey(ipv6: (0..<16).map { UInt8(truncatingIfNeeded: $0 < 8 ? i >> (8 * (7 - $0)) : 0) }))
            #expect(limiter.admit(address: v6) == nil)
            limiter.recordFailedAuthentication(address: ClientAddressKey(ipv4: UInt32(i)))
            limiter.charge(credential: "key-\(i)")
        }
        let tracked = limiter.trackedKeys
        #expect(tracked.addresses <= 64 && tracked.credentials <= 64 && tracked.failures <= 64, "\(tracked)")
        #expect(tracked.addresses > 0 && tracked.credentials > 0 && tracked.failures > 0)
        // The table still limits: the newest keys are there.
        let newest = ClientAddressKey(ipv4: 19_999)
        #expect(limiter.admit(address: newest) == nil)
        limiter.recordFailedAuthentication(address: newest)
        limiter.recordFailedAuthentication(address: newest)
        #expect(limiter.admit(address: newest)?.limit == .failedAuthentication)
    }

    @Test func failedAuthentications_blockTheAddress_untilTimeGivesOneBack() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.failedAuthentication = Self.rate(0.1, 3) }
        let attacker = try Self.address("198.51.100.1:4000"), holder = try Self.address("198.51.100.2:4000")
        for _ in 0..<3 {
            #expect(limiter.admit(address: attacker) == nil)
            limiter.recordFailedAuthentication(address: attacker)
        }
        let blocked = try #require(limiter.admit(address: attacker))
        #expect(blocked.limit == .failedAuthentication)
        #expect(blocked.retryAfterSeconds == 10)
        #expect(limiter.admit(address: holder) == nil, "another address is not locked out")
        // Only time gives a failure back (nothing a client does resets it).
        clock.advance(.seconds(9))
        #expect(limiter.admit(address: attacker)?.retryAfterSeconds == 1)
        clock.advance(.seconds(1))
        #expect(limiter.admit(address: attacker) == nil)
        limiter.recordFailedAuthentication(address: attacker)
        #expect(limiter.admit(address: attacker)?.refusedInARow == 1, "a new run of refusals")
        // The wait is a refill, so a long absence gives back the whole allowance.
        clock.advance(.seconds(30))
        for _ in 0..<3 { limiter.recordFailedAuthentication(address: attacker) }
        #expect(limiter.admit(address: attacker) != nil)
    }

    @Test func credentials_checkDoesNotTake_chargeAndTakeDo() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.perCredential = Self.rate(1, 2) }
        for _ in 0..<10 { #expect(limiter.check(credential: "k1") == nil) }
        #expect(limiter.trackedKeys.credentials == 0, "a check of an id never charged makes no entry")
        limiter.charge(credential: "k1")
        limiter.charge(credential: "k1")
        #expect(limiter.check(credential: "k1")?.limit == .credential)
        #expect(limiter.take(credential: "k1") != nil)
        #expect(limiter.check(credential: "k2") == nil)
        clock.advance(.seconds(1))
        #expect(limiter.check(credential: "k1") == nil)
        #expect(limiter.take(credential: "k1") == nil)
        // Charges past empty are debt, bounded by the burst: the wait never exceeds (burst + 1) / rate.
        for _ in 0..<100 { limiter.charge(credential: "k1") }
        #expect(limiter.check(credential: "k1")?.retryAfterSeconds == 3)
        clock.advance(.seconds(3))
        #expect(limiter.check(credential: "k1") == nil)
    }

    /// Server time is charged in seconds after the request answered; below one second left, the
    /// credential is refused until the bucket refills; the request-count bucket is another one.
    @Test func serverTime_chargedInSeconds_refusesBelowOneSecond() throws {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.serverTimePerCredential = Self.rate(0.5, 2) }
        #expect(limiter.limitsCredentials && limiter.limitsCredentialServerTime)
        limiter.charge(credential: "k1", serverTime: .milliseconds(900))
        #expect(limiter.check(credential: "k1") == nil, "1.1 s left")
        limiter.charge(credential: "k1", serverTime: .milliseconds(200))
        let refused = try #require(limiter.check(credential: "k1"))
        #expect(refused.limit == .credentialServerTime)
        #expect(refused.retryAfterSeconds == 1, "0.9 s left: 0.2 s at 0.5 a second")
        #expect(refused.description.contains("share of the server's time"))
        #expect(limiter.check(credential: "k2") == nil)
        #expect(limiter.take(credential: "k1") == nil, "a sync handshake takes from the request bucket only (none here)")
        // A request without a measured time (a streamed upload) costs no time.
        clock.advance(.seconds(1))
        limiter.charge(credential: "k1")
        #expect(limiter.check(credential: "k1") == nil)
        // One long request is debt down to -burst: (1 + 2) / 0.5 = 6 s at most.
        limiter.charge(credential: "k1", serverTime: .seconds(30))
        #expect(limiter.check(credential: "k1")?.retryAfterSeconds == 6)
        clock.advance(.seconds(6))
        #expect(limiter.check(credential: "k1") == nil)
    }

    /// Shares of their own, as an `Authenticator` hands them out (keys created with `--time-limit`).
    final class FixedShares: ServerTimeShares {
        let byCredential: [String: TokenBucketRate]
        init(_ byCredential: [String: TokenBucketRate]) { self.byCredential = byCredential }
        var anyShares: Bool { !byCredential.isEmpty }
        func serverTimeShare(credential: String) -> TokenBucketRate? { byCredential[credential] }
    }

    /// A credential's own share is charged and checked at its own rate, with the server's limit
    /// off (others are never charged) or on (others at the server's rate).
    @Test func serverTime_aCredentialsOwnShare_overridesTheServers() throws {
        let clock = SteppedClock()
        var limits = AbuseLimits()
        limits.failedAuthentication = nil
        limits.clock = { clock.now() }
        let off = AbuseLimiter(limits, shares: FixedShares([:]))
        #expect(!off.limitsCredentials && !off.limitsCredentialServerTime, "no share seen: nothing is checked")
        #expect(off.timesRequests, "but requests are timed: the first of a key with a share is charged")
        #expect(!Self.limiter(clock) { _ in }.timesRequests, "no shares, no server limit: not timed")
        let alone = AbuseLimiter(limits, shares: FixedShares(["partner": Self.rate(0.25, 1)]))
        #expect(alone.limitsCredentials && alone.limitsCredentialServerTime)
        alone.charge(credential: "partner", serverTime: .milliseconds(100))
        #expect(alone.check(credential: "partner")?.retryAfterSeconds == 1, "0.9 s left, 0.1 s at 0.25 a second: 0.4 s")
        clock.advance(.milliseconds(400))
        #expect(alone.check(credential: "partner") == nil)
        alone.charge(credential: "ours", serverTime: .seconds(60))
        #expect(alone.check(credential: "ours") == nil, "a credential without a share is not charged")
        #expect(alone.trackedKeys.credentials == 1)

        limits.serverTimePerCredential = Self.rate(10, 10)
        let both = AbuseLimiter(limits, shares: FixedShares(["partner": Self.rate(0.5, 2)]))
        both.charge(credential: "partner", serverTime: .seconds(2))
        both.charge(credential: "ours", serverTime: .seconds(2))
        #expect(both.check(credential: "partner")?.retryAfterSeconds == 2, "its own share: 1 s missing at 0.5 a second")
        #expect(both.check(credential: "ours") == nil, "the server's share: 8 s left")
    }

    /// Credentials are their bytes: a subject spelled NFD does not spend the NFC one's buckets.
    @Test func credentials_areByteExact() {
        let clock = SteppedClock()
        let limiter = Self.limiter(clock) { $0.perCredential = Self.rate(1, 1); $0.serverTimePerCredential = Self.rate(1, 1) }
        limiter.charge(credential: "jwt:caf\u{E9}", serverTime: .seconds(2))
        #expect(limiter.check(credential: "jwt:caf\u{E9}") != nil)
        #expect(limiter.check(credential: "jwt:cafe\u{301}") == nil)
        #expect(limiter.take(credential: "jwt:cafe\u{301}") == nil)
    }

    @Test func ratesParse() {
        #expect(TokenBucketRate(parsing: "5") == Self.rate(5, 5))
        #expect(TokenBucketRate(parsing: "0.5") == Self.rate(0.5, 1))
        #expect(TokenBucketRate(parsing: "0.1:20") == Self.rate(0.1, 20))
        for bad in ["", "0", "-1:3", "1:0", "1:0.5", "x", "1:2:3", "inf", "nan:1", "1:"] {
            #expect(TokenBucketRate(parsing: bad) == nil, "\(bad)")
        }
    }
}
