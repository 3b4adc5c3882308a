import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// What a session reports as its accepted subscriptions (`acceptedQueries`, relayed upstream by a
/// local node) and when its `subscriptionSetVersion` moves.
@Suite struct AcceptedSubscriptionsTests {
    @Test func onlyAcceptedSubscriptionsCount_andTheVersionMovesWhenTheSetChanges() {
        var h = SessionHarness.ready()
        #expect(h.session.acceptedQueries.isEmpty)
        let start = h.session.subscriptionSetVersion

        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM things WHERE kind = :k", arguments: ["k": "a"])))
        let afterFirst = h.session.subscriptionSetVersion
        #expect(afterFirst > start)
        // Refused (not a plain SELECT *, and a duplicate id): not accepted, the version stays.
        _ = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT count(*) FROM things")))
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM other")))
        #expect(h.session.subscriptionSetVersion == afterFirst)
        _ = h.receive(.subscribe(Subscribe(id: 3, query: "SELECT * FROM notes")))
        #expect(h.session.acceptedQueries.map(\.text) == ["SELECT * FROM things WHERE kind = :k", "SELECT * FROM notes"])
        #expect(h.session.acceptedQueries.map(\.collection) == ["things", "notes"])
        #expect(h.session.acceptedQueries.first?.arguments == ["k": "a"])

        // A step that only moves a subscription's phase (its page read) leaves the version alone.
        let beforeReads = h.session.subscriptionSetVersion
        _ = h.advance(1)
        #expect(h.session.subscriptionSetVersion == beforeReads)

        _ = h.receive(.unsubscribe(id: 1))
        #expect(h.session.subscriptionSetVersion > beforeReads)
        #expect(h.session.acceptedQueries.map(\.text) == ["SELECT * FROM notes"])
        // Unsubscribing what is not there changes nothing.
        let afterUnsub = h.session.subscriptionSetVersion
        _ = h.receive(.unsubscribe(id: 1))
        #expect(h.session.subscriptionSetVersion == afterUnsub)
    }

    @Test func aSubscriptionEndedByNarrowerCredentialsLeavesTheSet() {
        var h = SessionHarness.ready()
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM things")))
        _ = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM notes")))
        let before = h.session.subscriptionSetVersion
        _ = h.feed(.credentialsChecked(.accept(SyncPermissions(read: .only(["notes"]), write: .all)), epoch: 0))
        #expect(h.session.subscriptionSetVersion > before)
        #expect(h.session.acceptedQueries.map(\.text) == ["SELECT * FROM notes"])
    }
}
