import BigPeerTestSupport
import SyncPeer
import Testing
import Values
@testable import BigPeerServer

/// The union a local node relays upstream (`SubscriptionUnion`): counted per session, stale
/// versions and departed sessions ignored, a burst flushed once.
@Suite struct SubscriptionUnionTests {
    static let a = SyncSubscription(query: "SELECT * FROM things WHERE kind = 'a'", arguments: [:], collection: "things")
    static let b = SyncSubscription(query: "SELECT * FROM things WHERE kind = :k", arguments: ["k": "b"], collection: "things")
    static let c = SyncSubscription(query: "SELECT * FROM notes", arguments: [:], collection: "notes")

    @Test func theUnionCountsEachSubscriptionBySessions() {
        var u = SubscriptionUnion()
        u.opened(1)
        u.opened(2)
        _ = u.changed(1, version: 1, [Self.a, Self.b])
        _ = u.changed(2, version: 1, [Self.a])
        #expect(u.union == [Self.a, Self.b])
        _ = u.changed(1, version: 2, [Self.c])
        #expect(u.union == [Self.a, Self.c], "a is still held by session 2")
        _ = u.closed(2)
        #expect(u.union == [Self.c])
        _ = u.closed(1)
        #expect(u.union.isEmpty)
    }

    @Test func staleVersionsAndSessionsThatWentAreIgnored() {
        var u = SubscriptionUnion()
        var flag: Bool  // Testing's #expect cannot call a mutating method itself
        u.opened(1)
        _ = u.changed(1, version: 3, [Self.a])
        flag = u.changed(1, version: 2, [Self.b])
        #expect(!flag, "an older step's report arrived late")
        #expect(u.union == [Self.a])
        _ = u.closed(1)
        flag = u.changed(1, version: 4, [Self.b])
        #expect(!flag, "reported after the socket closed")
        flag = u.changed(7, version: 1, [Self.b])
        #expect(!flag, "never opened")
        #expect(u.union.isEmpty)
        flag = u.closed(1)
        #expect(!flag)
    }

    @Test func aBurstIsFlushedOnce_andOnlyWhatDiffersIsRelayed() {
        var u = SubscriptionUnion()
        var flag: Bool, taken: Set<SyncSubscription>?  // Testing's #expect cannot call a mutating method itself
        for s in 1...1000 as ClosedRange<UInt64> { u.opened(s) }
        flag = u.changed(1, version: 1, [Self.a])
        #expect(flag, "the first change schedules the flush")
        for s in 2...1000 as ClosedRange<UInt64> {
            flag = u.changed(s, version: 1, [Self.a, Self.b])
            #expect(!flag, "later ones join it")
        }
        #expect(u.scheduled)
        taken = u.take()
        #expect(taken == [Self.a, Self.b])
        flag = u.flushed()
        #expect(!flag)
        #expect(!u.scheduled)

        // A change that comes back to the relayed union before the flush relays nothing.
        flag = u.changed(1, version: 2, [Self.a, Self.c])
        #expect(flag)
        flag = u.changed(1, version: 3, [Self.a])
        #expect(!flag)
        taken = u.take()
        #expect(taken == nil)
        flag = u.flushed()
        #expect(!flag)

        // A change during a flush (between take and flushed) makes the flush schedule another.
        flag = u.changed(1, version: 4, [Self.c])
        #expect(flag)
        taken = u.take()
        #expect(taken == [Self.a, Self.b, Self.c])
        flag = u.changed(1, version: 5, [])
        #expect(!flag, "a flush is still running")
        flag = u.flushed()
        #expect(flag, "the caller schedules the next flush")
        #expect(u.scheduled)
        taken = u.take()
        #expect(taken == [Self.a, Self.b])
        flag = u.flushed()
        #expect(!flag)
    }

    @Test func theRelayIsToldTheUnion() async {
        let told = MutexBox<[Set<SyncSubscription>]>([])
        let relay = SubscriptionRelay(interval: .milliseconds(1)) { union in told.withLock { $0.append(union) } }
        relay.opened(1)
        relay.changed(1, version: 1, [Self.a])
        #expect(await eventually { told.withLock { $0.last } == [Self.a] })
        relay.closed(1)
        #expect(await eventually { told.withLock { $0.last } == [] })
    }
}
