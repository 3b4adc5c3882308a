// The peer-side session state machine, sans-I/O: handshake, subscriptions and resume, data and
// credit, checkpoints, uploads and acks, heartbeats, and a clean close with the documented code
// for every malformed or misplaced message.
@testable import SyncPeer
import SyncProtocol
import TestRandomness
import Testing
import Values

@Suite("Sync client session (sans-I/O)")
/// What the session is given to upload: only its reference and delta matter to it.
struct TestUpload: SyncUpload {
    var ref: DocumentRef
    var delta: [UInt8]
}

struct SyncClientSessionTests {
    typealias SyncClientSession = SyncPeer.SyncClientSession<TestUpload>
    typealias Action = SyncClientSession.Action
    static let welcome = Welcome(site: 42, sessionID: "s-1", heartbeatMillis: 20_000, maxMessageSize: 16 << 20, credit: 1 << 20)
    static let sub = SyncSubscription(query: "SELECT * FROM cars WHERE color = :c", arguments: ["c": "red"], collection: "cars")

    static func config() -> SyncClientSession.Configuration {
        SyncClientSession.Configuration(site: 0xABC, peerKey: [1, 2, 3], deviceName: "phone", credentials: .apiKey("k_1"))
    }

    static func sent(_ actions: [Action]) -> [SyncMessage] {
        actions.compactMap { if case .send(let b) = $0 { try? SyncMessageDecoder.decode(b) } else { nil } }
    }

    static func closeCode(_ actions: [Action]) -> UInt16? {
        for case .close(let code, _) in actions { return code }
        return nil
    }

    /// A session past the handshake.
    static func ready(_ c: SyncClientSession.Configuration = config()) -> SyncClientSession {
        var s = SyncClientSession(configuration: c)
        _ = s.start(now: 0)
        _ = s.receive(SyncMessage.welcome(welcome).encode(), now: 1)
        return s
    }

    @Test func handshake_sendsHello_thenWelcomeMakesItReady() throws {
        var s = SyncClientSession(configuration: Self.config())
        let hello = Self.sent(s.start(now: 0))
        guard case .hello(let h)? = hello.first else { Issue.record("no hello: \(hello)"); return }
        #expect(h.site == 0xABC && h.peerKey == [1, 2, 3] && h.deviceName == "phone" && h.credentials == .apiKey("k_1"))
        #expect(h.credit >= 65536 && h.maxMessageSize >= 65536)
        #expect(s.state == .awaitingWelcome)
        let actions = s.receive(SyncMessage.welcome(Self.welcome).encode(), now: 5)
        #expect(actions == [.connected(Self.welcome)])
        #expect(s.state == .ready)
    }

    @Test func refuse_reportsTheCodeAndCloses() {
        var s = SyncClientSession(configuration: Self.config())
        _ = s.start(now: 0)
        let actions = s.receive(SyncMessage.refuse(code: 4001, reason: "invalid API key").encode(), now: 1)
        #expect(actions == [.refused(code: 4001, reason: "invalid API key"), .close(code: 4001, reason: "invalid API key")])
        #expect(s.state == .closed)
        #expect(s.receive(SyncMessage.ping(1).encode(), now: 2).isEmpty)  // nothing after closing
    }

    @Test func subscribe_freshAndResumed() {
        var s = Self.ready()
        let fresh = Self.sent(s.subscribe(Self.sub, resume: nil))
        #expect(fresh == [.subscribe(Subscribe(id: 1, query: Self.sub.query, arguments: ["c": "red"]))])
        #expect(s.subscribe(Self.sub, resume: nil).isEmpty)  // the same key twice is one subscription
        var other = Self.sub
        other.arguments = ["c": "blue"]
        let resumed = Self.sent(s.subscribe(other, resume: (1207, [1, 0xFFFF_FFFF_FFFF_FF00])))
        #expect(resumed == [.subscribe(Subscribe(id: 2, query: other.query, arguments: ["c": "blue"], checkpoint: 1207, have: [1, 0xFFFF_FFFF_FFFF_FF00]))])
        let dropped = Self.sent(s.keepOnly([Self.sub.key]))
        #expect(dropped == [.unsubscribe(id: 2)])
    }

    @Test func data_isApplied_thenCreditedAndWanted_andCheckpointsFollowSynced() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: nil)
        let entry = ChangeEntry(document: DocumentRef(collection: "cars", id: "a"), kind: .upsert, payload: .state([1, 0xa0]))
        let docs = SyncMessage.documents(subscription: 1, entries: [entry]).encode()
        #expect(s.receive(docs, now: 10) == [.apply([entry], bytes: docs.count)])
        let after = Self.sent(s.applied(bytes: docs.count, wanted: [DocumentRef(collection: "cars", id: "z")]))
        #expect(after == [.credit(bytes: UInt64(docs.count)), .want([DocumentRef(collection: "cars", id: "z")])])
        // A checkpoint before `synced` does not move an unsynced subscription.
        #expect(s.receive(SyncMessage.checkpoint(txn: 5).encode(), now: 11).isEmpty)
        #expect(s.receive(SyncMessage.synced(subscription: 1, checkpoint: 7).encode(), now: 12) == [.saveCheckpoints([Self.sub.key: 7])])
        #expect(s.receive(SyncMessage.checkpoint(txn: 9).encode(), now: 13) == [.saveCheckpoints([Self.sub.key: 9])])
        // Not caught up while a `want` is outstanding; the state it asked for clears it.
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        let answer = ChangeEntry(document: DocumentRef(collection: "cars", id: "z"), kind: .upsert, payload: .state([1, 0xa0]))
        _ = s.receive(SyncMessage.changes(txn: 9, entries: [answer]).encode(), now: 14)
        #expect(!s.isCaughtUp(now: 50, quietMillis: 100, outboxEmpty: true))
        #expect(s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: false))
    }

    /// The server answers `want` only in subscribed collections: after the last subscription of a
    /// collection is dropped, its outstanding wants no longer keep the session from catching up.
    @Test func unsubscribing_forgetsWantsOfCollectionsNoLongerSubscribed() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: (5, []))
        _ = s.receive(SyncMessage.synced(subscription: 1, checkpoint: 5).encode(), now: 2)
        _ = s.applied(bytes: 10, wanted: [DocumentRef(collection: "cars", id: "z")])
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        _ = s.keepOnly([])
        #expect(s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
    }

    /// `gone` (PROTOCOL.md §4.7) answers a `want` for a document the server has no row for (or
    /// hides from this peer): the session stops waiting for it and hands it to the driver, which
    /// may evict its copy. Before it, such a want kept the session from ever catching up. A `gone`
    /// for a document this session did not ask for is ignored (it evicts nothing).
    @Test func gone_answersAWant_soTheSessionCatchesUp() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: (5, []))
        _ = s.receive(SyncMessage.synced(subscription: 1, checkpoint: 5).encode(), now: 2)
        let z = DocumentRef(collection: "cars", id: "z"), y = DocumentRef(collection: "cars", id: "y")
        _ = s.applied(bytes: 10, wanted: [z])
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        #expect(s.receive(SyncMessage.gone([y, z]).encode(), now: 3) == [.gone([z])])
        #expect(s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        #expect(s.receive(SyncMessage.gone([z]).encode(), now: 4).isEmpty, "answered already")
    }

    @Test func hello_announcesGone() {
        var s = SyncClientSession(configuration: Self.config())
        guard case .hello(let h)? = Self.sent(s.start(now: 0)).first else { Issue.record("no hello"); return }
        #expect(h.capabilities.contains(SyncCapability.gone))
    }

    @Test func subError_dropsTheSubscription() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: nil)
        let a = s.receive(SyncMessage.subscriptionError(id: 1, message: "syntax error").encode(), now: 2)
        #expect(a == [.subscriptionFailed(key: Self.sub.key, message: "syntax error")])
        #expect(s.subscriptionKeys.isEmpty)
        #expect(s.subscribe(Self.sub, resume: nil).isEmpty)  // not re-sent on this link
    }

    @Test func uploads_needPositiveCredit_andAcksReturnWhatWasSent() {
        var c = Self.config()
        c.uploadsInFlight = 8
        var s = SyncClientSession(configuration: c)
        _ = s.start(now: 0)
        var w = Self.welcome
        w.credit = 100
        _ = s.receive(SyncMessage.welcome(w).encode(), now: 1)
        let u = TestUpload(ref: DocumentRef(collection: "cars", id: "a"), delta: [UInt8](repeating: 7, count: 150))
        #expect(s.canUpload)
        let first = Self.sent(s.upload([u], seq: 1))
        #expect(first.count == 1)
        #expect(!s.canUpload)  // 100 - ~190 bytes: credit is no longer positive
        #expect(s.upload([u], seq: 2).isEmpty)
        #expect(s.uploadingDocuments == [u.ref])
        _ = s.receive(SyncMessage.credit(bytes: 500).encode(), now: 2)
        #expect(s.canUpload)
        let ack = s.receive(SyncMessage.ack(seq: 1, txn: 3, rejected: []).encode(), now: 3)
        #expect(ack == [.acknowledged([u], rejected: [])])
        #expect(s.uploadingDocuments.isEmpty)
        // An ack for an upload never sent is a violation.
        #expect(Self.closeCode(s.receive(SyncMessage.ack(seq: 99, txn: 3, rejected: []).encode(), now: 4)) == 4004)
    }

    /// Uploads wait until every subscription is synced: committed before an initial sync's
    /// snapshot, an upload is no live change for the session, and a document the server merged
    /// into a tombstone would reach the peer neither in a page nor afterwards (issue #16 item 13).
    @Test func uploads_waitUntilEverySubscriptionIsSynced() {
        var s = Self.ready()
        #expect(s.canUpload, "no subscription: nothing to wait for")
        _ = s.subscribe(Self.sub, resume: nil)
        #expect(!s.canUpload)
        _ = s.receive(SyncMessage.synced(subscription: 1, checkpoint: 7).encode(), now: 2)
        #expect(s.canUpload)
        var other = Self.sub
        other.arguments = ["c": "blue"]
        _ = s.subscribe(other, resume: (7, []))
        #expect(!s.canUpload, "a resumed subscription waits for its synced too")
    }

    /// With subscriptions, caught up needs a checkpoint at or after the txn of the last ack: the
    /// server has then handled the upload's change-log rows (and sent the merged state of a
    /// document created over a server version). Without subscriptions nothing is sent back.
    @Test func caughtUp_waitsForACheckpointCoveringTheLastAck() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: (5, []))
        _ = s.receive(SyncMessage.synced(subscription: 1, checkpoint: 5).encode(), now: 2)
        let u = TestUpload(ref: DocumentRef(collection: "cars", id: "a"), delta: [1])
        _ = s.upload([u], seq: 1)
        _ = s.receive(SyncMessage.ack(seq: 1, txn: 9, rejected: []).encode(), now: 3)
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        #expect(s.waitingFor(now: 10_000, quietMillis: 100, outboxEmpty: true)?.contains("txn 9") == true)
        _ = s.receive(SyncMessage.checkpoint(txn: 8).encode(), now: 4)
        #expect(!s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
        _ = s.receive(SyncMessage.checkpoint(txn: 9).encode(), now: 5)
        #expect(s.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))

        var bare = Self.ready()
        _ = bare.upload([u], seq: 1)
        _ = bare.receive(SyncMessage.ack(seq: 1, txn: 9, rejected: []).encode(), now: 3)
        #expect(bare.isCaughtUp(now: 10_000, quietMillis: 100, outboxEmpty: true))
    }

    @Test func creditAbove2To40_isAViolation() {
        var s = Self.ready()
        _ = s.receive(SyncMessage.credit(bytes: 1 << 39).encode(), now: 2)
        #expect(Self.closeCode(s.receive(SyncMessage.credit(bytes: 1 << 39).encode(), now: 3)) == 4004)
    }

    @Test func pingIsAnswered_heartbeatAndTimeouts() {
        var s = Self.ready()
        #expect(Self.sent(s.receive(SyncMessage.ping(77).encode(), now: 100)) == [.pong(77)])
        #expect(s.tick(now: 10_000).isEmpty)
        #expect(Self.sent(s.tick(now: 20_100)) == [.ping(1)])
        #expect(s.tick(now: 20_200).isEmpty)  // once per heartbeat interval
        #expect(Self.closeCode(s.tick(now: 60_100)) == 4008)
        var h = SyncClientSession(configuration: Self.config())
        _ = h.start(now: 0)
        #expect(h.tick(now: 9_999).isEmpty)
        #expect(Self.closeCode(h.tick(now: 10_000)) == 4008)
    }

    @Test func malformedOrMisplacedMessages_closeWithTheDocumentedCodes() {
        let cases: [(String, [UInt8], Bool, UInt16)] = [
            ("garbage", [0xFF, 0x00, 0x13], true, 4004),
            ("not a map", [0x01], true, 4004),
            ("unknown type", [0xA1, 0x61, 0x74, 0x63, 0x66, 0x6F, 0x6F], true, 4004),
            ("server-bound message", SyncMessage.subscribe(Subscribe(id: 1, query: "SELECT * FROM c")).encode(), true, 4004),
            ("second welcome", SyncMessage.welcome(Self.welcome).encode(), true, 4004),
            ("data before welcome", SyncMessage.checkpoint(txn: 1).encode(), false, 4004),
        ]
        for (name, bytes, afterWelcome, code) in cases {
            var s = afterWelcome ? Self.ready() : {
                var x = SyncClientSession(configuration: Self.config())
                _ = x.start(now: 0)
                return x
            }()
            let actions = s.receive(bytes, now: 5)
            #expect(Self.closeCode(actions) == code, "\(name)")
            guard case .bye(let byeCode, _)? = Self.sent(actions).first else { Issue.record("\(name): no bye"); continue }
            #expect(byeCode == code)
            #expect(s.state == .closed)
        }
        var small = Self.config()
        small.maxMessageSize = 64
        var s = Self.ready(small)
        #expect(Self.closeCode(s.receive(SyncMessage.bye(code: 1000, reason: String(repeating: "x", count: 100)).encode(), now: 2)) == 4009)
    }

    @Test func seededGarbage_neverCrashes_andAlwaysEndsInAKnownState() {
        var rng = SeededRandom(seed: 0xC11E17)
        let samples: [[UInt8]] = [
            SyncMessage.changes(txn: 3, entries: [ChangeEntry(document: DocumentRef(collection: "c", id: "x"), kind: .delete, payload: .delta([1, 2]))]).encode(),
            SyncMessage.ack(seq: 1, txn: 2, rejected: [UploadRejection(index: 0, message: "m")]).encode(),
            SyncMessage.synced(subscription: 1, checkpoint: 9).encode(),
        ]
        for i in 0..<5_000 {
            var s = Self.ready()
            _ = s.subscribe(Self.sub, resume: nil)
            var bytes = samples[i % samples.count]
            for _ in 0...rng.below(4) { bytes[rng.below(bytes.count)] = UInt8(truncatingIfNeeded: rng.next()) }
            if rng.below(3) == 0 { bytes = Array(bytes.prefix(rng.below(bytes.count))) }
            let actions = s.receive(bytes, now: 2)
            if let code = Self.closeCode(actions) { #expect([4004, 4009, 1000].contains(code) || s.state == .closed) }
        }
    }

    @Test func resumeAnsweredWithDocs_isAFullResync_reportingWhatWasDelivered() {
        var s = Self.ready()
        _ = s.subscribe(Self.sub, resume: (50, [1, 2]))
        let a = DocumentRef(collection: "cars", id: "a"), b = DocumentRef(collection: "cars", id: "b")
        _ = s.receive(SyncMessage.documents(subscription: 1, entries: [ChangeEntry(document: a, kind: .upsert, payload: .state([1]))]).encode(), now: 2)
        _ = s.receive(SyncMessage.changes(txn: 3, entries: [ChangeEntry(document: b, kind: .upsert, payload: .delta([1]))]).encode(), now: 3)
        let done = s.receive(SyncMessage.synced(subscription: 1, checkpoint: 3).encode(), now: 4)
        #expect(done == [.fullResyncFinished(key: Self.sub.key, delivered: [a, b]), .saveCheckpoints([Self.sub.key: 3])])
        // A resume answered with `synced` at once (the log reached back) evicts nothing.
        var t = Self.ready()
        _ = t.subscribe(Self.sub, resume: (50, [1]))
        #expect(t.receive(SyncMessage.synced(subscription: 1, checkpoint: 50).encode(), now: 2) == [.saveCheckpoints([Self.sub.key: 50])])
    }
}
