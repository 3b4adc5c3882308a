import Synchronization
import TestRandomness
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

typealias SeededRNG = SeededRandom
