import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Drives a `SyncSession` with a manual clock and records what it does.
struct SessionHarness {
    static let peerSite: UInt64 = 0xAB
    var session: SyncSession
    var now: UInt64 = 1_000_000

    init(configure: (inout SyncSession.Configuration) -> Void = { _ in }) {
        var c = SyncSession.Configuration(serverSite: 1, sessionID: "s-test")
        configure(&c)
        session = SyncSession(configuration: c, now: now)
    }

    static func hello(credit: UInt64 = 65536, version: UInt64 = 1, site: UInt64 = peerSite, max: UInt64 = 1 << 20,
                      capabilities: [String] = []) -> Hello {
        Hello(version: version, site: site, peerKey: [1], deviceName: "d", credentials: .apiKey("k"), credit: credit, maxMessageSize: max,
              capabilities: capabilities)
    }

    /// A session that completed the handshake.
    static func ready(credit: UInt64 = 65536, capabilities: [String] = [],
                      configure: (inout SyncSession.Configuration) -> Void = { _ in }) -> SessionHarness {
        var h = SessionHarness(configure: configure)
        _ = h.receive(.hello(hello(credit: credit, capabilities: capabilities)))
        _ = h.feed(.authenticated(.accept(.everything)))
        return h
    }

    /// What the transport holds before each step (the driver reports it; 0: it takes everything).
    var transportQueued = 0

    mutating func feed(_ input: SyncSessionInput) -> [SyncSessionAction] {
        session.noteTransportQueue(transportQueued)
        return session.handle(input, now: now)
    }
    mutating func receive(_ m: SyncMessage) -> [SyncSessionAction] { feed(.received(m.encode())) }
    mutating func advance(_ ms: UInt64) -> [SyncSessionAction] {
        now += ms
        return feed(.tick)
    }
}

func sent(_ actions: [SyncSessionAction]) -> [SyncMessage] {
    actions.compactMap { if case .send(let bytes, let m) = $0 { #expect(bytes == m.encode()); return m } else { return nil } }
}

func closeCode(_ actions: [SyncSessionAction]) -> UInt16? {
    for case .close(let code, _) in actions { return code }
    return nil
}

let car1 = DocumentRef(collection: "cars", id: "car-1")
let car2 = DocumentRef(collection: "cars", id: "car-2")
let red: Value = ["_id": "car-1", "color": "red"]
let blue: Value = ["_id": "car-1", "color": "blue"]

@Suite struct SyncSessionHandshakeTests {
    @Test func hello_asksForAuthentication_thenWelcomes() {
        var h = SessionHarness(configure: { $0.uploadCredit = 12345; $0.heartbeatMillis = 7000 })
        let a = h.receive(.hello(SessionHarness.hello()))
        #expect(a == [.authenticate(SessionHarness.hello())])
        #expect(h.session.state == .authenticating)
        let b = h.feed(.authenticated(.accept(.everything)))
        #expect(sent(b) == [.welcome(Welcome(site: 1, sessionID: "s-test", heartbeatMillis: 7000, maxMessageSize: 16 << 20, credit: 12345))])
        #expect(h.session.state == .ready)
        #expect(h.session.credit == 65536)
    }

    @Test func unsupportedVersion_isRefusedWith4002_beforeAuthentication() {
        var h = SessionHarness()
        let a = h.receive(.hello(SessionHarness.hello(version: 2)))
        guard case .refuse(4002, let reason)? = sent(a).first else { Issue.record("\(a)"); return }
        #expect(reason.contains("supported: 1"))
        #expect(closeCode(a) == 4002)
        #expect(!a.contains { if case .authenticate = $0 { true } else { false } })
        #expect(h.session.state == .closed)
        #expect(h.receive(.ping(1)).isEmpty, "nothing happens after close")
    }

    @Test func badCredentials_areRefusedWith4001() {
        var h = SessionHarness()
        _ = h.receive(.hello(SessionHarness.hello()))
        let a = h.feed(.authenticated(.refuse(code: .unauthorized, reason: "invalid API key")))
        #expect(sent(a) == [.refuse(code: 4001, reason: "invalid API key")])
        #expect(closeCode(a) == 4001)
    }

    @Test func serversOwnSiteID_isRefusedWith4003() {
        var h = SessionHarness()
        #expect(closeCode(h.receive(.hello(SessionHarness.hello(site: 1)))) == 4003)
    }

    @Test func tooSmallWindow_isAViolation() {
        var h = SessionHarness()
        let a = h.receive(.hello(SessionHarness.hello(credit: 100)))
        #expect(closeCode(a) == 4004)
        #expect(sent(a).isEmpty)
    }

    @Test func messagesOutOfState_closeWith4004() {
        var h = SessionHarness()
        #expect(closeCode(h.receive(.ping(1))) == 4004, "before hello")
        var h2 = SessionHarness()
        _ = h2.receive(.hello(SessionHarness.hello()))
        #expect(closeCode(h2.receive(.hello(SessionHarness.hello()))) == 4004, "a second hello before welcome")
        var h3 = SessionHarness.ready()
        #expect(closeCode(h3.receive(.hello(SessionHarness.hello()))) == 4004, "second hello")
        var h4 = SessionHarness.ready()
        #expect(closeCode(h4.receive(.checkpoint(txn: 3))) == 4004, "a server-only message")
    }

    /// Messages pipelined behind `hello` wait for the credentials, then run in order; on a refusal
    /// they are dropped; too many of them is a violation.
    @Test func pipelinedMessages_runAfterWelcome_inOrder() {
        var h = SessionHarness()
        _ = h.receive(.hello(SessionHarness.hello()))
        #expect(h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM c"))).isEmpty)
        #expect(h.receive(.ping(7)).isEmpty)
        let a = h.feed(.authenticated(.accept(.everything)))
        let messages = sent(a)
        guard messages.count == 2, case .welcome = messages[0] else { Issue.record("\(messages)"); return }
        #expect(messages[1] == .pong(7))
        #expect(a.contains { if case .readPage(1, _, _, _, _, _) = $0 { true } else { false } })

        var refused = SessionHarness()
        _ = refused.receive(.hello(SessionHarness.hello()))
        _ = refused.receive(.ping(1))
        let r = refused.feed(.authenticated(.refuse(code: .unauthorized, reason: "no")))
        #expect(sent(r).count == 1)  // the refusal only, no pong
        #expect(closeCode(r) == 4001)

        var flood = SessionHarness()
        _ = flood.receive(.hello(SessionHarness.hello()))
        var code: UInt16?
        for i in 0...SyncSession.maxEarlyMessages where code == nil { code = closeCode(flood.receive(.ping(UInt64(i)))) }
        #expect(code == 4004)
    }

    @Test func malformedAndOversizedMessages_close() {
        var h = SessionHarness.ready()
        #expect(closeCode(h.feed(.received([0xFF, 0x00]))) == 4004)
        var h2 = SessionHarness.ready(configure: { $0.limits.maxMessageSize = 100 })
        let big = SyncMessage.upload(seq: 1, entries: [UploadEntry(document: car1, delta: Array(repeating: 1, count: 200))])
        #expect(closeCode(h2.receive(big)) == 4009)
    }

    @Test func handshakeTimeout_closesWith4008() {
        var h = SessionHarness()
        #expect(h.advance(9_999).isEmpty)
        #expect(h.session.nextDeadline == h.now + 1)
        #expect(closeCode(h.advance(1)) == 4008)
    }

    @Test func authenticationTimeout_givesTheCheckOfALateHelloItsOwnTime() {
        // A hello at 9 s whose check (a connection webhook) may take 15 s: closed at 24 s, not 10 s.
        var h = SessionHarness(configure: { $0.authenticationTimeoutMillis = 15_000 })
        _ = h.advance(9_000)
        _ = h.receive(.hello(SessionHarness.hello()))
        #expect(h.session.state == .authenticating)
        #expect(h.session.nextDeadline == h.now + 15_000)
        #expect(h.advance(14_999).isEmpty)
        #expect(closeCode(h.advance(1)) == 4008)
        // Without a hello, the handshake timeout alone applies.
        var quiet = SessionHarness(configure: { $0.authenticationTimeoutMillis = 15_000 })
        #expect(quiet.advance(9_999).isEmpty)
        #expect(closeCode(quiet.advance(1)) == 4008)
    }

    @Test func heartbeat_pingsWhenQuiet_andTimesOutAfterThreeIntervals() {
        var h = SessionHarness.ready(configure: { $0.heartbeatMillis = 1000 })
        #expect(sent(h.advance(999)).isEmpty)
        #expect(sent(h.advance(1)) == [.ping(1)])
        #expect(sent(h.advance(500)).isEmpty, "one ping per interval")
        #expect(sent(h.advance(500)) == [.ping(2)])
        _ = h.receive(.pong(2))  // a sign of life resets the timer
        #expect(sent(h.advance(999)).isEmpty)
        #expect(sent(h.advance(1)) == [.ping(3)])
        _ = h.advance(1000)
        #expect(closeCode(h.advance(1000)) == 4008)
    }

    @Test func transportClosed_endsTheSessionSilently() {
        var h = SessionHarness.ready()
        #expect(h.feed(.transportClosed).isEmpty)
        #expect(h.session.state == .closed)
        #expect(h.feed(.uploadCommitted(seq: 1, txn: 1, rejected: [])).isEmpty, "late store results are dropped")
    }

    @Test func peerPing_isAnswered_andByeCloses() {
        var h = SessionHarness.ready()
        #expect(sent(h.receive(.ping(77))) == [.pong(77)])
        #expect(closeCode(h.receive(.bye(code: 1000, reason: ""))) == 1000)
        #expect(h.session.state == .closed)
    }
}

@Suite struct SyncSessionSubscriptionTests {
    static let query = "SELECT * FROM cars WHERE color = :c"

    /// A ready session with one synced subscription to red cars holding `car1`, cursor at 10.
    static func syncedOnRed(capabilities: [String] = []) -> SessionHarness {
        var h = SessionHarness.ready(capabilities: capabilities)
        _ = h.receive(.subscribe(Subscribe(id: 1, query: query, arguments: ["c": "red"])))
        _ = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-1", state: [1])], txn: 10, isLast: true)))
        return h
    }

    @Test func initialSync_pagesByID_thenSynced_thenLive() {
        var h = SessionHarness.ready(configure: { $0.pageRows = 2 })
        let a = h.receive(.subscribe(Subscribe(id: 1, query: Self.query, arguments: ["c": "red"])))
        guard case .readPage(1, let gen, let q, nil, 2, let maxBytes)? = a.first else { Issue.record("\(a)"); return }
        #expect(q.value.collection == "cars" && maxBytes > 0 && maxBytes <= 65536)
        let b = h.feed(.page(subscription: 1, generation: gen, DocumentPage(
            rows: [.init(id: "car-1", state: [1, 2]), .init(id: "car-2", state: [3])], txn: 10, isLast: false)))
        #expect(sent(b) == [.documents(subscription: 1, entries: [
            ChangeEntry(document: car1, kind: .upsert, payload: .state([1, 2])),
            ChangeEntry(document: car2, kind: .upsert, payload: .state([3]))])])
        guard case .readPage(1, _, _, .string("car-2")?, 2, _)? = b.last else { Issue.record("\(b)"); return }
        _ = h.feed(.logHead(12))  // a write commits meanwhile: no log read while syncing
        let c = h.feed(.page(subscription: 1, generation: gen, DocumentPage(rows: [], txn: 12, isLast: true)))
        #expect(sent(c) == [.synced(subscription: 1, checkpoint: 10)], "the first page's snapshot")
        #expect(c.last == .readLog(after: .end(of: 10)))
        #expect(h.session.held == [DocumentHash.of(car1), DocumentHash.of(car2)])
        // txn 11 changes car-1 (held, still red); txn 12 changes an unrelated blue car.
        let d = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car1, kind: .upsert, delta: [9], value: red),
            LogEntry(txn: 12, document: DocumentRef(collection: "cars", id: "car-7"), kind: .upsert, delta: [8], value: ["_id": "car-7", "color": "blue"]),
        ], through: 12)))
        #expect(sent(d) == [.changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .delta([9]))]), .checkpoint(txn: 12)])
        #expect(h.session.cursor == 12)
    }

    @Test func badSubscriptions_getSubError_andTheSessionStays() {
        var h = SessionHarness.ready(configure: { $0.limits.maxSubscriptions = 2 })
        for q in ["SELECT FROM", "DELETE FROM cars", "SELECT color FROM cars", "SELECT * FROM cars ORDER BY x", "SELECT COUNT(*) FROM cars"] {
            guard case .subscriptionError(9, _)? = sent(h.receive(.subscribe(Subscribe(id: 9, query: q)))).first else {
                Issue.record("\(q) was accepted"); continue
            }
        }
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM a")))
        guard case .subscriptionError(1, _)? = sent(h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM b")))).first else { Issue.record("duplicate id"); return }
        _ = h.receive(.subscribe(Subscribe(id: 2, query: "SELECT * FROM b")))
        guard case .subscriptionError(3, _)? = sent(h.receive(.subscribe(Subscribe(id: 3, query: "SELECT * FROM c")))).first else { Issue.record("limit"); return }
        #expect(h.session.state == .ready)
    }

    /// A held document that no longer matches gets its current full state (the entry carries it),
    /// not the row's delta: the value used for matching is the current one, so later changes are
    /// in it too, and they are not sent once the document has left.
    @Test func redCarTurnedBlue_deliversTheCurrentState_andNothingAfter() {
        var h = Self.syncedOnRed()
        _ = h.feed(.logHead(13))
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car1, kind: .upsert, delta: [0xB1], value: blue, state: [0x5B]),
            LogEntry(txn: 12, document: car1, kind: .upsert, delta: [0xB2], value: blue, state: [0x5B]),
        ], through: 12)))
        #expect(sent(a) == [.changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0x5B]))]), .checkpoint(txn: 12)])
        #expect(h.session.held.isEmpty)
        let b = h.feed(.log(LogBatch(entries: [LogEntry(txn: 13, document: car1, kind: .upsert, delta: [0xB3], value: blue, state: [0x5C])], through: 13)))
        #expect(sent(b).isEmpty)
    }

    /// Issue #16 item 13 (seed 2 of the CLI simulation): the peer held `d5` (its own offline
    /// copy, listed in `have`); after its checkpoint another peer inserted `d5` (txn 11) and a
    /// third deleted it (txn 12). Both rows are read with the current value, deleted, so the
    /// insert already looks like the change that makes it leave: its delta went out, `held` was
    /// dropped, and the delete was skipped. The peer kept a live `d5` for good. Now it gets the
    /// tombstone's state, which contains the delete.
    @Test func heldDocumentInsertedThenDeletedAfterTheCheckpoint_getsTheTombstone_notTheInsert() {
        var h = SessionHarness.ready()
        let d5 = DocumentRef(collection: "c", id: "d5")
        _ = h.feed(.logHead(12))
        let a = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM COLLECTION c (n COUNTER)", checkpoint: 10, have: [DocumentHash.of(d5)])))
        guard case .checkResume(1, let gen, 10)? = a.first else { Issue.record("\(a)"); return }
        _ = h.feed(.resumeChecked(subscription: 1, generation: gen, reachable: true))
        let b = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: d5, kind: .upsert, delta: [0x11], value: nil, origin: 7, state: [0x7B]),
            LogEntry(txn: 12, document: d5, kind: .delete, delta: [0x12], value: nil, origin: 8, state: [0x7B]),
        ], through: 12)))
        #expect(sent(b) == [.changes(txn: 11, entries: [ChangeEntry(document: d5, kind: .delete, payload: .state([0x7B]))]), .checkpoint(txn: 12)])
        #expect(h.session.held.isEmpty)
    }

    /// The peer created `{k: 1.0}` offline and lists it in `have`; the server's row is `{k: 1}`,
    /// the same jsonb key. The hash names both forms, so the peer's copy counts as held and the
    /// next change comes as a delta, not the whole state again.
    @Test func heldDocumentNamedInTheOtherNumberForm_getsDeltas() {
        var h = SessionHarness.ready()
        let peerForm = DocumentRef(collection: "c", id: ["k": .double(1)])
        let serverForm = DocumentRef(collection: "c", id: ["k": .int(1)])
        _ = h.feed(.logHead(10))
        let a = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM COLLECTION c (n COUNTER)", checkpoint: 10, have: [DocumentHash.of(peerForm)])))
        guard case .checkResume(1, let gen, 10)? = a.first else { Issue.record("\(a)"); return }
        _ = h.feed(.resumeChecked(subscription: 1, generation: gen, reachable: true))
        let b = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: serverForm, kind: .upsert, delta: [0x11], value: ["_id": ["k": .int(1)], "n": 2], state: [0x7B]),
        ], through: 11)))
        #expect(sent(b) == [.changes(txn: 11, entries: [ChangeEntry(document: serverForm, kind: .upsert, payload: .delta([0x11]))]), .checkpoint(txn: 11)])
        #expect(h.session.held == [DocumentHash.of(serverForm)])
    }

    /// Without a state in the entry, the leaving document's state is fetched and sent although it
    /// does not match.
    @Test func leavingDocumentWithoutAStateInTheEntry_isFetched_andSentAlthoughItDoesNotMatch() {
        var h = Self.syncedOnRed()
        let a = h.feed(.log(LogBatch(entries: [LogEntry(txn: 11, document: car1, kind: .upsert, delta: [0xB1], value: blue)], through: 11)))
        guard case .fetchDocuments(let req, [car1])? = a.last else { Issue.record("\(a)"); return }
        let b = h.feed(.fetched(request: req, [FetchedDocument(document: car1, state: [0x5B], value: blue)]))
        #expect(sent(b) == [.changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0x5B]))]), .checkpoint(txn: 11)])
        #expect(h.session.held.isEmpty)
    }

    /// Seed 21 of the CLI simulation: three peers' uploads of `d4` were group-committed into one
    /// transaction: this peer's update (row 0), then two deletes. All rows carry the current value
    /// (deleted), so at its own row the document looked as if the peer's own upload made it
    /// leave: nothing was sent, `held` was dropped, and the deletes after it were skipped. The
    /// peer now gets the tombstone's state.
    @Test func ownUploadOfAHeldDocument_deletedLaterInTheSameTransaction_sendsTheTombstone() {
        var h = Self.syncedOnRed()
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, seq: 0, document: car1, kind: .upsert, delta: [0x01], value: nil, origin: SessionHarness.peerSite, state: [0x7E]),
            LogEntry(txn: 11, seq: 1, document: car1, kind: .delete, delta: [0x02], value: nil, origin: 7, state: [0x7E]),
            LogEntry(txn: 11, seq: 2, document: car1, kind: .delete, delta: [0x03], value: nil, origin: 8, state: [0x7E]),
        ], through: 11)))
        #expect(sent(a) == [.changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .delete, payload: .state([0x7E]))]), .checkpoint(txn: 11)])
        #expect(h.session.held.isEmpty)
    }

    @Test func deletedHeldDocument_sendsTheTombstonesState() {
        var h = Self.syncedOnRed()
        let a = h.feed(.log(LogBatch(entries: [LogEntry(txn: 11, document: car1, kind: .delete, delta: [0xDE], value: nil, state: [0x70])], through: 11)))
        #expect(sent(a).first == .changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .delete, payload: .state([0x70]))]))
    }

    /// The peer's own upload of a document it created offline, over a server tombstone it never
    /// received (an initial sync sends live documents only): an INITIAL insert stays deleted on
    /// the server (stamp 0 is under the barrier), so the peer must get the tombstone; before, its
    /// own upload was never sent back and it kept the document alive.
    @Test func ownUploadOfADocumentNotHeld_mergedIntoAServerHistory_sendsTheMergedState() {
        var h = Self.syncedOnRed()
        let car3 = DocumentRef(collection: "cars", id: "car-3")
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car3, kind: .delete, delta: [0x01], value: nil, origin: SessionHarness.peerSite, state: [0x7C]),
        ], through: 11)))
        #expect(sent(a) == [.changes(txn: 11, entries: [ChangeEntry(document: car3, kind: .delete, payload: .state([0x7C]))]), .checkpoint(txn: 11)])
        #expect(h.session.held == [DocumentHash.of(car1)])
        // Not in a collection the peer subscribes to: nothing (it may not be allowed to read it).
        let other = DocumentRef(collection: "trucks", id: "t-1")
        let b = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 12, document: other, kind: .upsert, delta: [0x01], value: ["_id": "t-1"], origin: SessionHarness.peerSite, state: [0x7D]),
        ], through: 12)))
        #expect(sent(b).isEmpty)
    }

    /// A creation logs no delta (docs/STORAGE.md): a peer that still holds an older copy (the
    /// server had evicted it, then it was created anew) gets the state the entry carries, whether
    /// the new document still matches or leaves the subscription; without a state only a
    /// matching document is fetched.
    @Test func heldDocumentCreatedAnew_withoutALoggedDelta_getsItsState() {
        var h = Self.syncedOnRed()
        let a = h.feed(.log(LogBatch(entries: [LogEntry(txn: 11, document: car1, kind: .upsert, delta: nil, value: red, state: [0x5C])], through: 11)))
        #expect(sent(a) == [.changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0x5C]))]), .checkpoint(txn: 11)])
        #expect(h.session.held.contains(DocumentHash.of(car1)))
        let b = h.feed(.log(LogBatch(entries: [LogEntry(txn: 12, document: car1, kind: .upsert, delta: nil, value: blue, state: [0x5D])], through: 12)))
        #expect(sent(b) == [.changes(txn: 12, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0x5D]))]), .checkpoint(txn: 12)])
        #expect(h.session.held.isEmpty)
    }

    @Test func documentEnteringASubscription_getsItsFullState() {
        var h = Self.syncedOnRed()
        let car2Red: Value = ["_id": "car-2", "color": "red"]
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car2, kind: .upsert, delta: [0x01], value: car2Red),
            LogEntry(txn: 11, document: car1, kind: .upsert, delta: [0x02], value: red),
            LogEntry(txn: 12, document: car1, kind: .upsert, delta: [0x03], value: red),
        ], through: 12)))
        #expect(sent(a).isEmpty)
        guard case .fetchDocuments(let req, [car2])? = a.last else { Issue.record("\(a)"); return }
        let b = h.feed(.fetched(request: req, [FetchedDocument(document: car2, state: [0x5A], value: car2Red)]))
        #expect(sent(b) == [
            .changes(txn: 11, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .delta([0x02])),
                                        ChangeEntry(document: car2, kind: .upsert, payload: .state([0x5A]))]),
            .changes(txn: 12, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .delta([0x03]))]),
            .checkpoint(txn: 12),
        ])
        #expect(h.session.held.contains(DocumentHash.of(car2)))
    }

    /// With the state read once by the change feed, no per-session fetch is needed.
    @Test func documentEnteringWithItsStateInTheEntry_isSentWithoutAFetch() {
        var h = Self.syncedOnRed()
        let car2Red: Value = ["_id": "car-2", "color": "red"]
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car2, kind: .upsert, delta: [0x01], value: car2Red, state: [0x5B]),
        ], through: 11)))
        #expect(!a.contains { if case .fetchDocuments = $0 { true } else { false } })
        #expect(sent(a) == [
            .changes(txn: 11, entries: [ChangeEntry(document: car2, kind: .upsert, payload: .state([0x5B]))]),
            .checkpoint(txn: 11),
        ])
        #expect(h.session.held.contains(DocumentHash.of(car2)))
    }

    @Test func peersOwnUploads_areNotEchoed_andEvictsAreNotSent() {
        var h = Self.syncedOnRed()
        let a = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car1, kind: .upsert, delta: [1], value: red, origin: SessionHarness.peerSite),
            LogEntry(txn: 12, document: car1, kind: .evict, delta: nil, value: nil),
        ], through: 12)))
        #expect(sent(a).isEmpty)
        #expect(h.session.cursor == 12)
        // The idle checkpoint goes out on a tick after the interval.
        #expect(sent(h.advance(5_000)).contains(.checkpoint(txn: 12)))
    }

    /// While pages stream, the idle-checkpoint deadline is not armed (`tick` sends no checkpoint
    /// during an initial sync): the next deadline is the heartbeat, not a time in the past that
    /// would make the driver's timer loop spin for the whole sync. Once synced it is armed again.
    @Test func initialSync_armsNoPastDeadline() {
        var h = SessionHarness.ready(configure: { $0.heartbeatMillis = 20_000 })
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        _ = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-1", state: [1])], txn: 3, isLast: false)))
        h.now += 6_000
        #expect(h.session.nextDeadline == h.now - 6_000 + 20_000, "the heartbeat, measured from the last message received")
        #expect(sent(h.feed(.tick)).isEmpty)
        _ = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-2", state: [2])], txn: 4, isLast: true)))
        #expect(h.session.nextDeadline <= h.now, "synced: the idle checkpoint is due")
        #expect(sent(h.feed(.tick)) == [.checkpoint(txn: 3)])
        #expect(h.session.nextDeadline > h.now)
    }

    @Test func unsubscribeDuringInitialSync_dropsThePage() {
        var h = SessionHarness.ready()
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        _ = h.receive(.unsubscribe(id: 1))
        let a = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "car-1", state: [1])], txn: 3, isLast: true)))
        #expect(sent(a).isEmpty)
        #expect(h.session.held.isEmpty && h.session.subscriptionCount == 0)
    }

    @Test func resume_reachable_sendsSyncedAtOnce_andReadsTheLogFromTheCheckpoint() {
        var h = SessionHarness.ready()
        _ = h.feed(.logHead(50))
        let a = h.receive(.subscribe(Subscribe(id: 4, query: Self.query, arguments: ["c": "red"], checkpoint: 40, have: [DocumentHash.of(car1)])))
        guard case .checkResume(4, let gen, 40)? = a.first else { Issue.record("\(a)"); return }
        let b = h.feed(.resumeChecked(subscription: 4, generation: gen, reachable: true))
        #expect(sent(b) == [.synced(subscription: 4, checkpoint: 40)])
        #expect(b.last == .readLog(after: .end(of: 40)))
        // car-1 left while the peer was away: it still gets its state, because it said it holds it.
        let c = h.feed(.log(LogBatch(entries: [LogEntry(txn: 45, document: car1, kind: .upsert, delta: [7], value: blue, state: [8])], through: 50)))
        #expect(sent(c) == [.changes(txn: 45, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([8]))]), .checkpoint(txn: 50)])
    }

    @Test func resume_unreachable_fallsBackToAFullSync() {
        var h = SessionHarness.ready()
        let a = h.receive(.subscribe(Subscribe(id: 4, query: "SELECT * FROM cars", checkpoint: 3)))
        guard case .checkResume(4, let gen, 3)? = a.first else { Issue.record("\(a)"); return }
        let b = h.feed(.resumeChecked(subscription: 4, generation: gen, reachable: false))
        guard case .readPage(4, _, _, nil, _, _)? = b.first else { Issue.record("\(b)"); return }
    }

    /// A `want` is answered for every requested document of a subscribed collection that the
    /// server has: matching, no longer matching, or a tombstone (issue #16 item 13: a want for a
    /// tombstone got no answer, and the peer waited for it until `--sync-once` gave up with
    /// "still receiving"). Only matching ones are held afterwards.
    @Test func want_returnsFullStates_ofSubscribedCollectionsDocuments_tombstonesToo() {
        var h = Self.syncedOnRed()
        let car3 = DocumentRef(collection: "cars", id: "car-3")
        let truck = DocumentRef(collection: "trucks", id: "t-1")
        let a = h.receive(.want([car1, car2, car3, truck]))
        guard case .fetchDocuments(let req, [car1, car2, car3, truck])? = a.last else { Issue.record("\(a)"); return }
        let b = h.feed(.fetched(request: req, [FetchedDocument(document: car1, state: [0xF1], value: red),
                                               FetchedDocument(document: car2, state: [0xF2], value: ["_id": "car-2", "color": "blue"]),
                                               FetchedDocument(document: car3, state: [0xF3], value: nil),
                                               FetchedDocument(document: truck, state: [0xF4], value: ["_id": "t-1"])]))
        #expect(sent(b) == [.changes(txn: 10, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0xF1])),
                                                        ChangeEntry(document: car2, kind: .upsert, payload: .state([0xF2])),
                                                        ChangeEntry(document: car3, kind: .delete, payload: .state([0xF3]))])])
        #expect(h.session.held == [DocumentHash.of(car1)])
    }

    /// With `gone` in `hello.caps`, every wanted document of a subscribed collection gets an
    /// answer (PROTOCOL.md §4.7): its state, or `gone` when the server has no row for it, so the
    /// peer stops waiting. Not for a collection no subscription reads; a document named twice is
    /// answered once; a held document the server no longer has is no longer held.
    @Test func want_ofADocumentWithoutARow_isAnsweredGone_toAPeerThatUnderstandsIt() {
        var h = Self.syncedOnRed(capabilities: [SyncCapability.gone])
        let car9 = DocumentRef(collection: "cars", id: "car-9")
        let truck = DocumentRef(collection: "trucks", id: "t-1")
        let a = h.receive(.want([car1, car9, truck, car9]))
        guard case .fetchDocuments(let req, _)? = a.last else { Issue.record("\(a)"); return }
        #expect(h.session.held == [DocumentHash.of(car1)])
        let b = h.feed(.fetched(request: req, [FetchedDocument(document: car1, state: [0xF1], value: red)]))
        #expect(sent(b) == [.gone([car9]), .changes(txn: 10, entries: [ChangeEntry(document: car1, kind: .upsert, payload: .state([0xF1]))])])
        // car-1 gone from the server: no longer held, so a later change brings its full state.
        let c = h.receive(.want([car1]))
        guard case .fetchDocuments(let req2, [car1])? = c.last else { Issue.record("\(c)"); return }
        #expect(sent(h.feed(.fetched(request: req2, []))) == [.gone([car1])])
        #expect(h.session.held.isEmpty)
    }

    /// A peer that did not list `gone` never receives it (it would not decode it): no answer
    /// for a document without a row, as before the message existed.
    @Test func want_ofADocumentWithoutARow_getsNoAnswer_withoutTheCapability() {
        var h = Self.syncedOnRed()
        let car9 = DocumentRef(collection: "cars", id: "car-9")
        let a = h.receive(.want([car9]))
        guard case .fetchDocuments(let req, [car9])? = a.last else { Issue.record("\(a)"); return }
        #expect(sent(h.feed(.fetched(request: req, []))).isEmpty)
    }
}

@Suite struct SyncSessionFlowControlTests {
    @Test func liveChanges_stopAtTheWindow_andResumeFromTheCursorWithCredit() {
        var h = SyncSessionSubscriptionTests.syncedOnRed()
        let window = h.session.credit
        _ = h.feed(.logHead(200))
        let delta = [UInt8](repeating: 0xAA, count: 10_000)
        let entries = (11...200).map { LogEntry(txn: Int64($0), document: car1, kind: .upsert, delta: delta, value: red) }
        let a = h.feed(.log(LogBatch(entries: entries, through: 200)))
        let messages = sent(a)
        let changeBytes = messages.filter(\.consumesCredit).map { $0.encode().count }.reduce(0, +)
        #expect(changeBytes <= Int(window) + 10_100, "never more than the window plus one message")
        #expect(changeBytes > Int(window) - 10_100)
        let delivered = messages.compactMap { if case .changes(let t, _) = $0 { t } else { nil } }
        #expect(h.session.cursor == delivered.last)
        #expect(messages.last == .checkpoint(txn: delivered.last ?? -1))
        #expect(!a.contains(.readLog(after: .end(of: h.session.cursor ?? 0))), "no read without credit")
        #expect(h.feed(.logHead(201)).isEmpty)
        // Credit returns: the session reads on from its cursor (nothing was buffered).
        let b = h.receive(.credit(bytes: 100_000))
        #expect(b == [.readLog(after: .end(of: delivered.last ?? -1))])
    }

    @Test func noPageIsRead_withoutCredit() {
        var h = SessionHarness.ready()
        _ = h.receive(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
        let big = [UInt8](repeating: 1, count: 70_000)
        let a = h.feed(.page(subscription: 1, generation: 1, DocumentPage(rows: [.init(id: "a", state: big)], txn: 1, isLast: false)))
        #expect(h.session.credit < 0)
        #expect(!a.contains { if case .readPage = $0 { true } else { false } })
        let b = h.receive(.credit(bytes: 80_000))
        guard case .readPage(1, _, _, .string("a")?, _, let maxBytes)? = b.first else { Issue.record("\(b)"); return }
        #expect(maxBytes == Int(h.session.credit), "a page is bounded by the credit left")
    }

    @Test func uploads_needCredit_andAreAckedInOrderAfterCommit() {
        var h = SessionHarness.ready(configure: { $0.uploadCredit = 200 })
        let up1 = SyncMessage.upload(seq: 1, entries: [UploadEntry(document: car1, delta: Array(repeating: 1, count: 80))])
        let up2 = SyncMessage.upload(seq: 2, entries: [UploadEntry(document: car2, delta: [2])])
        #expect(h.receive(up1) == [.applyUpload(seq: 1, origin: SessionHarness.peerSite, entries: [UploadEntry(document: car1, delta: Array(repeating: 1, count: 80))])])
        #expect(h.receive(up2) == [.applyUpload(seq: 2, origin: SessionHarness.peerSite, entries: [UploadEntry(document: car2, delta: [2])])], "credit was still positive")
        #expect(sent(h.feed(.uploadCommitted(seq: 2, txn: 8, rejected: []))).isEmpty, "acks keep arrival order")
        let a = sent(h.feed(.uploadCommitted(seq: 1, txn: 7, rejected: [UploadRejection(index: 0, message: "gap")])))
        #expect(a == [.ack(seq: 1, txn: 7, rejected: [UploadRejection(index: 0, message: "gap")]), .credit(bytes: UInt64(up1.encode().count)),
                      .ack(seq: 2, txn: 8, rejected: []), .credit(bytes: UInt64(up2.encode().count))])
        var h2 = SessionHarness.ready(configure: { $0.uploadCredit = 10 })
        _ = h2.receive(up1)
        #expect(closeCode(h2.receive(up2)) == 4004, "an upload without credit is a violation")
    }

    /// After an `ack`, a checkpoint covering its txn follows as soon as the position passes it
    /// (not 5 s later as an idle checkpoint): the peer then knows the server has handled its
    /// upload's change-log rows and sent what they caused for it.
    @Test func afterAnAck_aCheckpointFollowsOnceThePositionCoversIt() {
        var h = SyncSessionSubscriptionTests.syncedOnRed()  // cursor 10
        _ = h.receive(.upload(seq: 1, entries: [UploadEntry(document: car1, delta: [1])]))
        let a = sent(h.feed(.uploadCommitted(seq: 1, txn: 12, rejected: [])))
        #expect(a.count == 2, "ack and credit; the position is still at 10: \(a)")
        _ = h.feed(.logHead(12))
        let b = h.feed(.log(LogBatch(entries: [
            LogEntry(txn: 11, document: car2, kind: .upsert, delta: [2], value: blue),
            LogEntry(txn: 12, document: car1, kind: .upsert, delta: [1], value: red, origin: SessionHarness.peerSite),
        ], through: 12)))
        #expect(sent(b) == [.checkpoint(txn: 12)], "nothing was sent for these rows, but the upload's row is handled")
        // Already past the ack's txn (an upload with nothing new): at once.
        _ = h.receive(.upload(seq: 2, entries: [UploadEntry(document: car1, delta: [1])]))
        #expect(sent(h.feed(.uploadCommitted(seq: 2, txn: 12, rejected: []))).count == 2, "12 was already covered")
        _ = h.receive(.upload(seq: 3, entries: [UploadEntry(document: car1, delta: [1])]))
        _ = h.feed(.logHead(13))
        _ = h.feed(.log(LogBatch(entries: [LogEntry(txn: 13, document: car2, kind: .upsert, delta: [2], value: blue)], through: 13)))
        let c = sent(h.feed(.uploadCommitted(seq: 3, txn: 13, rejected: [])))
        #expect(c.last == .checkpoint(txn: 13), "\(c)")
    }

    @Test func creditOverflow_isAViolation() {
        var h = SessionHarness.ready()
        _ = h.receive(.credit(bytes: 1 << 40 - 65536))
        #expect(closeCode(h.receive(.credit(bytes: 1))) == 4004)
    }
}

@Suite struct SyncSessionRobustnessTests {
    /// Random inputs in random order (messages of every type, store results that match nothing the
    /// session asked for, ticks): the session never traps, keeps its bounds, and closes at most once.
    @Test func randomInputs_neverCrash_andKeepInvariants() {
        var rng = SeededRandom(seed: 0xC0FFEE)
        for round in 0..<200 {
            var h = round % 2 == 0 ? SessionHarness.ready() : SessionHarness()
            var closes = 0
            for _ in 0..<60 {
                let input: SyncSessionInput
                switch Int.random(in: 0...9, using: &rng) {
                case 0...3: input = .received(SampleMessages.all.randomElement(using: &rng)!.encode())
                case 4 where Bool.random(using: &rng):
                    input = .pageBoundary(subscription: UInt32.random(in: 0...3, using: &rng), generation: UInt64.random(in: 0...3, using: &rng),
                                          PageBoundary(nextAfter: "x", isLast: Bool.random(using: &rng), rows: 1, stateBytes: Int.random(in: 0...70_000, using: &rng)))
                case 4: input = .page(subscription: UInt32.random(in: 0...3, using: &rng), generation: UInt64.random(in: 0...3, using: &rng),
                                      DocumentPage(rows: [.init(id: "x", state: [1])], txn: Int64.random(in: 0...20, using: &rng), isLast: Bool.random(using: &rng)))
                case 5: input = .log(LogBatch(entries: [LogEntry(txn: 5, document: car1, kind: .upsert, delta: [1], value: red)], through: Int64.random(in: 0...9, using: &rng)))
                case 6: input = .fetched(request: UInt64.random(in: 0...4, using: &rng), [FetchedDocument(document: car1, state: [2], value: red)])
                case 7: input = .uploadCommitted(seq: UInt64.random(in: 0...6, using: &rng), txn: 3, rejected: [])
                case 8: input = .logHead(Int64.random(in: 0...30, using: &rng))
                default:
                    h.now += UInt64.random(in: 0...30_000, using: &rng)
                    input = .tick
                }
                let actions = h.feed(input)
                closes += actions.filter { if case .close = $0 { true } else { false } }.count
                #expect(h.session.credit >= -Int64(h.session.configuration.limits.maxMessageSize))
                #expect(h.session.pendingWants.count <= SyncSession.maxPendingWants)
                #expect(h.session.pageReads.count <= 2)
                // A deadline that has passed is one `tick` acts on: afterwards it lies ahead (or
                // the session closed). Otherwise the driver's timer loop would spin.
                if h.session.state != .closed, h.session.nextDeadline <= h.now {
                    closes += h.feed(.tick).filter { if case .close = $0 { true } else { false } }.count
                    #expect(h.session.state == .closed || h.session.nextDeadline > h.now)
                }
            }
            #expect(closes <= 1)
        }
    }
}
