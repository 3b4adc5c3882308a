import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// The session side of issue #16 items 5 and 9, on a manual clock: a full transport stops
/// production whatever the credit, credentials expire on time, `auth` replaces permissions, and
/// re-checks of older credentials are ignored.
@Suite struct SyncSessionTransportAndCredentialTests {
    static let query = "SELECT * FROM cars WHERE color = :c"

    /// A session synced on red cars, with `credit` and a transport limit of `limit` bytes.
    static func synced(credit: UInt64, limit: Int) -> SessionHarness {
        var h = SessionHarness(configure: { $0.maxQueuedBytes = limit })
        _ = h.receive(.hello(SessionHarness.hello(credit: credit)))
        _ = h.feed(.authenticated(.accept(.everything)))
        _ = h.receive(.subscribe(Subscribe(id: 1, query: query, arguments: ["c": "red"])))
        _ = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-1", state: [1])], txn: 10, isLast: true)))
        return h
    }

    @Test func aFullTransport_stopsLiveChanges_whateverTheCredit_andADrainResumesThem() {
        var h = Self.synced(credit: 1 << 30, limit: 100_000)
        _ = h.feed(.logHead(200))
        let delta = [UInt8](repeating: 0xAA, count: 10_000)
        let entries = (11...200).map { LogEntry(txn: Int64($0), document: car1, kind: .upsert, delta: delta, value: red) }
        let a = h.feed(.log(LogBatch(entries: entries, through: 200)))
        let bytes = sent(a).map { $0.encode().count }.reduce(0, +)
        #expect(bytes <= 100_000 + 10_200, "the transport limit plus one message, not the credit (\(bytes))")
        #expect(h.session.isWaitingForTransport)
        #expect(!a.contains { if case .readLog = $0 { true } else { false } })
        // Still full: nothing. Drained: reads on from the cursor.
        h.transportQueued = 100_000
        #expect(h.feed(.transportDrained).isEmpty)
        h.transportQueued = 0
        #expect(h.feed(.transportDrained) == [.readLog(after: .end(of: h.session.cursor ?? -1))])
    }

    @Test func aFullTransport_boundsThePageRead() {
        var h = SessionHarness(configure: { $0.maxQueuedBytes = 50_000 })
        _ = h.receive(.hello(SessionHarness.hello(credit: 1 << 30)))
        _ = h.feed(.authenticated(.accept(.everything)))
        h.transportQueued = 20_000
        let a = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        guard case .readPage(1, _, _, nil, _, let maxBytes)? = a.first else { Issue.record("\(a)"); return }
        #expect(maxBytes <= 30_000, "a page fits the room left in the transport (\(maxBytes))")
    }

    @Test func credentialsExpire_closingTheSessionWith4001_atTheirDeadline() {
        var h = SessionHarness()
        _ = h.receive(.hello(SessionHarness.hello()))
        _ = h.feed(.authenticated(.accept(SyncPermissions(read: .all, write: .all, validForMillis: 2_000))))
        #expect(h.session.nextDeadline == h.now + 2_000)
        #expect(closeCode(h.advance(1_999)) == nil)
        let a = h.advance(1)
        #expect(closeCode(a) == 4001)
        #expect(a.contains(.close(code: 4001, reason: "credentials expired")))
    }

    @Test func auth_replacesPermissionsAndExpiry_andEndsSubscriptionsNoLongerReadable() {
        var h = Self.synced(credit: 1 << 20, limit: 1 << 20)
        _ = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM trucks")))
        _ = h.feed(.page(subscription: 2, generation: 2, DocumentPage(rows: [.init(id: "t-1", state: [1])], txn: 10, isLast: true)))
        let a = h.receive(.refreshAuth(.jwt("new")))
        #expect(a == [.reauthenticate(.jwt("new"), epoch: 1)])
        let b = h.feed(.reauthenticated(.accept(SyncPermissions(read: .only(["cars"]), write: .all, validForMillis: 60_000)), epoch: 1))
        #expect(sent(b) == [.subscriptionError(id: 2, message: "not permitted to read collection trucks (credentials changed)"),
                          .authRefreshed(CredentialStatus(validForMillis: 60_000))])
        #expect(h.session.credentialEpoch == 1)
        #expect(h.session.credentialDeadline == h.now + 60_000)
        // A change to the truck the peer holds is not sent (not even as the change that makes it leave).
        _ = h.feed(.logHead(11))
        let truck = DocumentRef(collection: "trucks", id: "t-1")
        let c = h.feed(.log(LogBatch(entries: [LogEntry(txn: 11, document: truck, kind: .upsert, delta: [9], value: ["_id": "t-1"])], through: 11)))
        #expect(!sent(c).contains { if case .changes = $0 { true } else { false } }, "\(c)")
        #expect(h.session.held.contains(DocumentHash.of(truck)) == false)
    }

    @Test func refusedAuth_closesWithItsCode_andASecondAuthInFlightIsAViolation() {
        var h = Self.synced(credit: 1 << 20, limit: 1 << 20)
        _ = h.receive(.refreshAuth(.jwt("a")))
        #expect(closeCode(h.receive(.refreshAuth(.jwt("b")))) == 4004)

        var g = Self.synced(credit: 1 << 20, limit: 1 << 20)
        _ = g.receive(.refreshAuth(.jwt("bad")))
        #expect(closeCode(g.feed(.reauthenticated(.refuse(code: .unauthorized, reason: "the JWT has expired"), epoch: 1))) == 4001)
    }

    @Test func reChecks_ofOlderCredentialsAreIgnored_currentOnesCloseOrNarrow() {
        var h = Self.synced(credit: 1 << 20, limit: 1 << 20)
        _ = h.receive(.refreshAuth(.apiKey("new")))
        _ = h.feed(.reauthenticated(.accept(.everything), epoch: 1))
        #expect(h.feed(.credentialsChecked(.refuse(code: .unauthorized, reason: "the API key has been revoked"), epoch: 0)).isEmpty)
        #expect(h.session.state == .ready)
        let narrowed = h.feed(.credentialsChecked(.accept(SyncPermissions(read: .only(["trucks"]), write: .all)), epoch: 1))
        #expect(sent(narrowed) == [.subscriptionError(id: 1, message: "not permitted to read collection cars (credentials changed)")])
        let a = h.feed(.credentialsChecked(.refuse(code: .unauthorized, reason: "the API key has been revoked"), epoch: 1))
        #expect(a.contains(.close(code: 4001, reason: "the API key has been revoked")))
    }
}

@Suite struct SyncSessionTrackedDocumentsTests {
    /// Repeated resumes with large `have`s cannot grow the session's memory without end.
    @Test func resumesWithHaves_beyondTheTrackedLimit_getSubError() {
        #expect(SyncSession.Configuration(serverSite: 1, sessionID: "s").maxTrackedDocuments == 1 << 22)
        var h = SessionHarness.ready(configure: { $0.maxTrackedDocuments = 1000 })
        let first = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", checkpoint: 5, have: (0..<UInt64(500)).map { $0 })))
        #expect(!sent(first).contains { if case .subscriptionError = $0 { true } else { false } })
        let second = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM trucks", checkpoint: 5, have: (0..<UInt64(501)).map { $0 })))
        guard case .subscriptionError(2, let msg)? = sent(second).first else { Issue.record("\(second)"); return }
        #expect(msg.contains("resume refused"))
    }
}

extension SyncSessionTransportAndCredentialTests {
    /// `want`ed documents go out only as far as the window allows; the rest are fetched again
    /// once the transport drains, so a `want` of many large documents cannot fill the queue.
    @Test func wantedDocuments_beyondTheWindow_waitForTheDrain() {
        var h = Self.synced(credit: 1 << 30, limit: 50_000)
        let refs = (1...3).map { DocumentRef(collection: "cars", id: .string("w\($0)")) }
        let a = h.receive(.want(refs))
        guard case .fetchDocuments(let request, let asked)? = a.first else { Issue.record("\(a)"); return }
        #expect(asked == refs)
        let big = [UInt8](repeating: 7, count: 40_000)
        let docs = refs.map { FetchedDocument(document: $0, state: big, value: ["_id": $0.id, "color": "red"]) }
        let b = h.feed(.fetched(request: request, docs))
        let delivered = sent(b).flatMap { m -> [Value] in if case .changes(_, let e) = m { e.map(\.document.id) } else { [] } }
        #expect(delivered == ["w1", "w2"], "the window (50 000 bytes) takes two of the three")
        #expect(h.session.isWaitingForTransport)
        h.transportQueued = 0
        let c = h.feed(.transportDrained)
        guard case .fetchDocuments(_, let again)? = c.first else { Issue.record("\(c)"); return }
        #expect(again == [refs[2]])
    }
}
