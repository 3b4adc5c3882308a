// Identity and time: site ids, hybrid logical clock timestamps, and the local writer (`Replica`).
//
// HLC timestamp layout (one UInt64, compares as a plain integer):
//
//    63  62                                  16 15               0
//   +---+-------------------------------------+-----------------+
//   | 0 |  physical milliseconds since 1970   | logical counter |
//   +---+-------------------------------------+-----------------+
//         47 bits (good until year 6429)         16 bits
//
// The top bit stays 0 so every timestamp (and every difference of two) fits in an Int64, which
// the CBOR state encoding relies on. See docs/CRDT.md "Clock" for the drift policy.

/// A replica's identity: 64 random bits, chosen once and persisted by the caller.
public struct SiteID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public init(_ rawValue: UInt64) { self.rawValue = rawValue }

    /// A fresh random site id (the system RNG by default).
    public static func random() -> SiteID {
        var g = SystemRandomNumberGenerator()
        return random(using: &g)
    }

    public static func random<G: RandomNumberGenerator>(using g: inout G) -> SiteID {
        SiteID(g.next())
    }

    public static func < (a: SiteID, b: SiteID) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "site:" + String(rawValue, radix: 16) }
}

/// A hybrid logical clock reading: physical milliseconds in the high bits, a logical counter in the low 16.
public struct HLCTimestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: UInt64
    public static let logicalBits: UInt64 = 16
    public static let maxPhysicalMillis: UInt64 = (1 << 47) - 1
    public static let zero = HLCTimestamp(rawValue: 0)
    public static let max = HLCTimestamp(rawValue: (1 << 63) - 1)

    public init(rawValue: UInt64) { self.rawValue = rawValue }
    public init(physicalMillis: UInt64, logical: UInt16) {
        rawValue = Swift.min(physicalMillis, Self.maxPhysicalMillis) << Self.logicalBits | UInt64(logical)
    }

    public var physicalMillis: UInt64 { rawValue >> Self.logicalBits }
    public var logical: UInt16 { UInt16(truncatingIfNeeded: rawValue) }
    public static func < (a: HLCTimestamp, b: HLCTimestamp) -> Bool { a.rawValue < b.rawValue }
    public var description: String { "\(physicalMillis).\(logical)" }
}

/// Hybrid logical clock (Kulkarni et al. 2014) with a bound on how far remote readings may pull it.
///
/// * `tick` never returns a value <= any value it returned or observed before, even when the wall
///   clock goes backwards: the physical part holds and the logical counter advances (on counter
///   overflow the physical part is bumped by one millisecond).
/// * `observe` adopts a remote timestamp only up to `wall + maxForwardDriftMillis`: a peer whose clock
///   is a year fast cannot drag this replica's clock (and so every later write here) a year ahead.
///   The remote write itself is still merged: convergence never depends on clocks (docs/CRDT.md).
public struct HybridLogicalClock: Sendable, Equatable {
    public static let defaultMaxForwardDriftMillis: UInt64 = 5 * 60 * 1000

    public private(set) var last: HLCTimestamp
    public var maxForwardDriftMillis: UInt64

    /// `last` restores a persisted high-water mark after a restart (see docs/CRDT.md).
    public init(last: HLCTimestamp = .zero, maxForwardDriftMillis: UInt64 = defaultMaxForwardDriftMillis) {
        self.last = last
        self.maxForwardDriftMillis = maxForwardDriftMillis
    }

    /// A new timestamp for a local event, strictly greater than every earlier one.
    public mutating func tick(wallMillis: UInt64) -> HLCTimestamp {
        let wall = HLCTimestamp(physicalMillis: wallMillis, logical: 0)
        if wall > last {
            last = wall
        } else if last.logical == UInt16.max {
            last = HLCTimestamp(physicalMillis: last.physicalMillis + 1, logical: 0)
        } else {
            last = HLCTimestamp(rawValue: last.rawValue + 1)
        }
        return last
    }

    /// Takes a remote reading into account, capped at `wallMillis + maxForwardDriftMillis`.
    public mutating func observe(_ remote: HLCTimestamp, wallMillis: UInt64) {
        let capMillis = wallMillis &+ maxForwardDriftMillis
        let cap = HLCTimestamp(physicalMillis: capMillis < wallMillis ? HLCTimestamp.maxPhysicalMillis : capMillis,
                               logical: UInt16.max)
        let adopted = Swift.min(remote, cap)
        if adopted > last { last = adopted }
    }
}

/// The local writer: its site id, its clock, and where wall time comes from (injected for tests).
///
/// One `Replica` is shared by all documents of a process; it is a value, so a server keeps it behind
/// a `Mutex` and passes it `inout` to each document operation.
public struct Replica: Sendable {
    public let site: SiteID
    public var clock: HybridLogicalClock
    public let wallClock: @Sendable () -> UInt64

    public init(site: SiteID, clock: HybridLogicalClock = HybridLogicalClock(),
                wallClock: @escaping @Sendable () -> UInt64 = Replica.systemMillis) {
        self.site = site
        self.clock = clock
        self.wallClock = wallClock
    }

    /// A timestamp for a local event in a document whose version vector already has `floor` for this site.
    mutating func nextDot(after floor: HLCTimestamp?) -> HLCTimestamp {
        var t = clock.tick(wallMillis: wallClock())
        if let f = floor, t <= f {
            // The clock restarted behind a previous life of this site: never reuse a dot.
            clock.observe(f, wallMillis: f.physicalMillis)
            t = clock.tick(wallMillis: wallClock())
        }
        return t
    }

    mutating func observe(_ remote: HLCTimestamp) {
        clock.observe(remote, wallMillis: wallClock())
    }

    /// Milliseconds since 1970 from the system real-time clock.
    public static let systemMillis: @Sendable () -> UInt64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(max(0, ts.tv_sec)) * 1000 + UInt64(max(0, ts.tv_nsec)) / 1_000_000
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
