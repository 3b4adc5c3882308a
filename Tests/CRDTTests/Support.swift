import Synchronization
import Testing
import Values
@testable import CRDT

/// A manual wall clock for tests: time moves only when the test says so.
final class ManualClock: Sendable {
    private let millis: Mutex<UInt64>
    init(_ start: UInt64 = 1_700_000_000_000) { millis = Mutex(start) }
    func advance(_ ms: UInt64) { millis.withLock { $0 += ms } }
    func set(_ ms: UInt64) { millis.withLock { $0 = ms } }
    var now: UInt64 { millis.withLock { $0 } }
}

func makeReplica(_ site: UInt64, clock: ManualClock = ManualClock()) -> Replica {
    Replica(site: SiteID(site), wallClock: { clock.now })
}

/// SplitMix64: a tiny seeded generator so every property test is reproducible.
struct SeededRNG: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
