import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// `sub.known` (PROTOCOL.md §4.3): an initial sync does not send a document the peer listed with
/// the digest of the state it has now; it is held as if sent. Another digest, or no entry, and it
/// is sent as usual.
@Suite struct SyncSessionKnownStatesTests {
    static func ref(_ id: String) -> DocumentRef { DocumentRef(collection: "cars", id: .string(id)) }
    static func ids(_ messages: [SyncMessage]) -> [Value] {
        messages.flatMap { m -> [Value] in if case .documents(_, let entries) = m { entries.map(\.document.id) } else { [] } }
    }

    @Test func documentsListedWithTheirCurrentState_areNotSent_butHeld() {
        let same: [UInt8] = [1, 2, 3], older: [UInt8] = [4, 5], current: [UInt8] = [4, 5, 6]
        var known = [
            KnownState(document: DocumentHash.of(Self.ref("car-1")), state: StateDigest.of(same)),
            KnownState(document: DocumentHash.of(Self.ref("car-2")), state: StateDigest.of(older)),
        ]
        known.sort()
        var h = SessionHarness.ready()
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", known: known)))
        let page = h.feed(.page(subscription: 1, generation: 1, DocumentPage(
            rows: [.init(id: "car-1", state: same), .init(id: "car-2", state: current), .init(id: "car-3", state: [7])],
            txn: 10, isLast: true, nextAfter: "car-3")))
        #expect(Self.ids(sent(page)) == ["car-2", "car-3"], "car-1's state is the one the peer has")
        #expect(sent(page).last == .synced(subscription: 1, checkpoint: 10))
        #expect(h.session.statesAlreadyKnown == 1)
        #expect(h.session.held == Set(["car-1", "car-2", "car-3"].map { DocumentHash.of(Self.ref($0)) }), "car-1 is held: later changes come as deltas")
        #expect(h.session.subscriptions[1]?.known.isEmpty == true, "forgotten once live")
    }

    @Test func knownWithACheckpoint_getsSubError() {
        var h = SessionHarness.ready()
        let a = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", checkpoint: 5, known: [KnownState(document: 1, state: 2)])))
        guard case .subscriptionError(1, let msg)? = sent(a).first else { Issue.record("\(a)"); return }
        #expect(msg.contains("without cp"))
    }

    @Test func knownBeyondTheTrackedLimit_getsSubError() {
        var h = SessionHarness.ready(configure: { $0.maxTrackedDocuments = 1000 })
        let first = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", known: (0..<UInt64(600)).map { KnownState(document: $0, state: 0) })))
        #expect(!sent(first).contains { if case .subscriptionError = $0 { true } else { false } })
        let second = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM trucks", known: (0..<UInt64(401)).map { KnownState(document: $0, state: 0) })))
        guard case .subscriptionError(2, let msg)? = sent(second).first else { Issue.record("\(second)"); return }
        #expect(msg.contains("known refused"))
    }
}
