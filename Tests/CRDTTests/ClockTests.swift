import Testing
@testable import CRDT

@Suite struct ClockTests {
    @Test func tickIsMonotonicWhenTheWallClockGoesBackwards() {
        var clock = HybridLogicalClock()
        let a = clock.tick(wallMillis: 10_000)
        let b = clock.tick(wallMillis: 9_000)
        let c = clock.tick(wallMillis: 9_500)
        let d = clock.tick(wallMillis: 10_001)
        #expect(a < b && b < c && c < d)
        #expect(b.physicalMillis == 10_000 && b.logical == 1)
        #expect(d == HLCTimestamp(physicalMillis: 10_001, logical: 0))
    }

    @Test func logicalOverflowBorrowsAMillisecond() {
        var clock = HybridLogicalClock(last: HLCTimestamp(physicalMillis: 5, logical: UInt16.max))
        let t = clock.tick(wallMillis: 1)
        #expect(t == HLCTimestamp(physicalMillis: 6, logical: 0))
    }

    @Test func remoteTimestampsAreAdoptedOnlyUpToTheDriftBound() {
        var clock = HybridLogicalClock(maxForwardDriftMillis: 1_000)
        clock.observe(HLCTimestamp(physicalMillis: 10_500, logical: 3), wallMillis: 10_000)
        #expect(clock.last == HLCTimestamp(physicalMillis: 10_500, logical: 3))
        // A year fast: the clock stops at wall + 1 s instead of jumping a year.
        let yearAhead = HLCTimestamp(physicalMillis: 10_000 + 365 * 86_400_000, logical: 0)
        clock.observe(yearAhead, wallMillis: 10_000)
        #expect(clock.last.physicalMillis == 11_000)
        #expect(clock.tick(wallMillis: 10_000) > HLCTimestamp(physicalMillis: 11_000, logical: UInt16.max - 1))
    }

    @Test func replicaNeverReusesADotAfterItsClockRestartsBehind() {
        let wall = ManualClock(1_000)
        var replica = makeReplica(1, clock: wall)
        let previous = HLCTimestamp(physicalMillis: 50_000, logical: 7)
        let dot = replica.nextDot(after: previous)
        #expect(dot > previous)
    }

    @Test func timestampsFitInSixtyThreeBits() {
        let t = HLCTimestamp(physicalMillis: UInt64.max, logical: UInt16.max)
        #expect(t.rawValue <= HLCTimestamp.max.rawValue)
    }
}
