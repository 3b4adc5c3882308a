import Testing
import TestRandomness
import Values
@testable import CRDT

/// `delta(since:)` served from the recent-writes index must equal the whole-tree walk, always.
@Suite struct RecentWritesTests {
    @Test func theStoreFlowIsServedFromTheIndexAndMatchesTheWalk() throws {
        var r = makeReplica(1)
        var d = try Document(id: "x")
        _ = try d.upsert(["a": 1, "m": ["k": "v"], "b": "x"], types: .nonStrict, replica: &r)
        var loaded = try Document.decode(d.encode())  // as Store loads it
        let before = loaded.versionVector
        #expect(loaded.recent.paths.isEmpty && loaded.recent.serves(before))
        _ = try loaded.set("m.k", to: "w", types: .nonStrict, replica: &r)
        #expect(loaded.recent.paths == [["m", "k"]])
        let delta = loaded.delta(since: before)
        #expect(delta == loaded.delta(since: before, useRecentWrites: false))
        #expect(delta.encode() == loaded.delta(since: before, useRecentWrites: false).encode())
        // An older vector than the one it was loaded with is not covered: the whole tree is walked.
        #expect(!loaded.recent.serves(VersionVector()))
        #expect(loaded.delta(since: VersionVector()) == loaded.delta(since: VersionVector(), useRecentWrites: false))
    }

    @Test func moreThanTheBoundForgetsThePathsButNotTheWritesOfThatOperation() throws {
        var r = makeReplica(1)
        var d = try Document(id: "x")
        _ = try d.upsert(["a": 1], replica: &r)
        let before = d.versionVector
        var many: [String: Value] = [:]
        for i in 0..<(RecentWrites.maxPaths + 10) { many["f\(i)"] = .int(Int64(i)) }
        _ = try d.upsert(many, replica: &r)
        #expect(d.recent.paths.isEmpty && d.recent.floor == d.versionVector)
        #expect(!d.recent.serves(before))
        let delta = d.delta(since: before)
        #expect(delta == d.delta(since: before, useRecentWrites: false))
        var other = try Document(id: "x")
        _ = try other.merge(d.delta(since: VersionVector()))
        #expect(other.encode() == d.encode())
        _ = try d.set("f3", to: 7, replica: &r)  // after forgetting, new writes are listed again
        #expect(d.recent.paths == [["f3"]])
    }

    /// Two replicas, random writes over 100 keys (so the bound is crossed), merges both ways, and
    /// decode round trips; after every step each recent vector gets the same delta both ways.
    @Test(arguments: 0..<30) func indexedDeltasEqualTheWalk(seed: Int) throws {
        var rng = SeededRNG(seed: UInt64(seed) &* 7919 &+ 3)
        let clock = ManualClock()
        var rs = [makeReplica(1, clock: clock), makeReplica(2, clock: clock)]
        var ds = [try Document(id: "x"), try Document(id: "x")]
        _ = try ds[0].upsert(["m": ["a": 1]], types: .nonStrict, replica: &rs[0])
        var seen: [VersionVector] = [VersionVector()]
        for _ in 0..<60 {
            clock.advance(rng.next() % 3)
            let i = Int(rng.next() % 2)
            let key = "k\(rng.next() % 100)"
            let path: FieldPath = rng.next() % 3 == 0 ? FieldPath(["m", key]) : FieldPath([key])
            switch rng.next() % 8 {
            case 0, 1, 2: _ = try? ds[i].set(path, to: .int(Int64(rng.next() % 50)), types: .nonStrict, replica: &rs[i])
            case 3: _ = try? ds[i].unset(path, replica: &rs[i])
            case 4: _ = try? ds[i].increment(path, by: 1, types: .nonStrict, replica: &rs[i])
            case 5: ds[i] = try Document.decode(ds[i].encode())
            case 6:
                var fields: [String: Value] = [:]
                for n in 0..<Int(rng.next() % 40) { fields["u\(n)"] = .int(Int64(n)) }
                _ = try? ds[i].upsert(fields, replica: &rs[i])
            default: _ = try ds[i].merge(ds[1 - i].delta(since: ds[i].versionVector))
            }
            seen.append(ds[i].versionVector)
            for d in ds {
                for v in seen.suffix(6) {
                    let a = d.delta(since: v), b = d.delta(since: v, useRecentWrites: false)
                    #expect(a.encode() == b.encode())
                }
            }
        }
    }
}
