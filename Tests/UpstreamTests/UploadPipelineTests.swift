import Store
import SyncPeer
import SyncProtocol
import Testing
import Values
@testable import Upstream

/// The upload position: it moves only past what the upstream acknowledged, and a session that
/// ends re-reads everything not acknowledged.
@Suite struct UploadPipelineTests {
    static func upload(_ txn: Int64, _ seq: Int32, _ id: String = "d") -> UpstreamUpload {
        UpstreamUpload(ref: DocumentRef(collection: "c", id: .string(id)), delta: [1, 2, 3], position: ChangeLogPosition(txn: txn, seq: seq), isFullState: false)
    }

    @Test func positionMovesOnlyPastAcknowledgedBatches_inAnyAckOrder() {
        var p = UploadPipeline()
        p.start(at: ChangeLogPosition(txn: 4, seq: -1))
        p.read([Self.upload(5, 0), Self.upload(6, 0), Self.upload(7, 0), Self.upload(7, 1)], end: .end(of: 9))
        // Nothing of 4 was found: the position is "before 5/0".
        #expect(p.acknowledged == ChangeLogPosition(txn: 5, seq: -1))
        let first = p.take(seq: 1, maxDocuments: 2, maxBytes: 1 << 20)
        let second = p.take(seq: 2, maxDocuments: 2, maxBytes: 1 << 20)
        #expect(first.map(\.position.txn) == [5, 6] && second.map(\.position.txn) == [7, 7])
        #expect(first.allSatisfy { $0.seq == 1 } && second.allSatisfy { $0.seq == 2 })
        // The second acknowledged first: nothing moves while the first is outstanding.
        p.acknowledged(seq: 2, retry: [])
        #expect(p.acknowledged == ChangeLogPosition(txn: 5, seq: -1))
        p.acknowledged(seq: 1, retry: [])
        // Everything read is acknowledged: the end of the read, past the skipped rows of 8 and 9.
        #expect(p.acknowledged == .end(of: 9))
    }

    @Test func aRetryKeepsTheRowsPosition_untilItIsAcknowledged() {
        var p = UploadPipeline()
        p.start(at: .end(of: 0))
        p.read([Self.upload(1, 0, "a"), Self.upload(1, 1, "b"), Self.upload(2, 0, "c")], end: .end(of: 2))
        let batch = p.take(seq: 1, maxDocuments: 10, maxBytes: 1 << 20)
        var retry = batch[1]
        retry.needsFullState = true
        p.acknowledged(seq: 1, retry: [retry])
        #expect(p.acknowledged == ChangeLogPosition(txn: 1, seq: 0))  // "a" is done, "b" is not
        #expect(p.queue.map(\.ref.id) == ["b"])
        _ = p.take(seq: 2, maxDocuments: 10, maxBytes: 1 << 20)
        p.acknowledged(seq: 2, retry: [])
        #expect(p.acknowledged == .end(of: 2))
    }

    @Test func aSessionThatEnds_readsAgainFromTheAcknowledgedPosition() {
        var p = UploadPipeline()
        p.start(at: .end(of: 0))
        p.read([Self.upload(1, 0), Self.upload(2, 0), Self.upload(3, 0)], end: .end(of: 3))
        _ = p.take(seq: 1, maxDocuments: 1, maxBytes: 1 << 20)
        _ = p.take(seq: 2, maxDocuments: 1, maxBytes: 1 << 20)
        p.acknowledged(seq: 1, retry: [])
        p.linkDown()
        #expect(!p.started && p.queue.isEmpty)
        #expect(p.readEnd == ChangeLogPosition(txn: 2, seq: -1) && p.acknowledged == p.readEnd)
        p.start(at: p.acknowledged)
        #expect(p.mayHaveMore)
    }

    @Test func aBatchPutBack_isSentLater_andThePositionWaitsForIt() {
        var p = UploadPipeline()
        p.start(at: .end(of: 0))
        p.read([Self.upload(1, 0), Self.upload(2, 0)], end: .end(of: 2))
        let first = p.take(seq: 1, maxDocuments: 1, maxBytes: 1 << 20)
        let second = p.take(seq: 2, maxDocuments: 1, maxBytes: 1 << 20)
        p.putBack(seq: 1, first)  // the session could not take it
        p.acknowledged(seq: 2, retry: [])
        #expect(p.acknowledged == ChangeLogPosition(txn: 1, seq: -1), "not past the change put back")
        #expect(p.queue.map(\.position) == [ChangeLogPosition(txn: 1, seq: 0)])
        _ = p.take(seq: 3, maxDocuments: 1, maxBytes: 1 << 20)
        p.acknowledged(seq: 3, retry: [])
        #expect(p.acknowledged == .end(of: 2) && second.count == 1)
    }

    @Test func batchesRespectTheByteBound_butAlwaysTakeOne() {
        var p = UploadPipeline()
        p.start(at: .end(of: 0))
        var big = Self.upload(1, 0)
        big.delta = [UInt8](repeating: 0, count: 1000)
        p.read([big, Self.upload(1, 1), Self.upload(1, 2)], end: .end(of: 1))
        #expect(p.take(seq: 1, maxDocuments: 10, maxBytes: 100).count == 1)
        #expect(p.take(seq: 2, maxDocuments: 10, maxBytes: 100).count == 2)
    }

    @Test func aReadThatFindsNothingNew_stopsReadingUntilTheHeadMoves() {
        var p = UploadPipeline()
        p.start(at: .end(of: 3))
        p.read([], end: .end(of: 5))  // only the upstream's own changes: passed, not sent
        #expect(p.mayHaveMore && p.acknowledged == .end(of: 5))
        p.read([], end: .end(of: 5))
        #expect(!p.mayHaveMore)
    }

    @Test func displayURLDropsUserInformation() {
        #expect(UpstreamConfiguration.withoutUserInfo("wss://user:secret@cloud.example:443/api/v4/sync") == "wss://cloud.example:443/api/v4/sync")
        #expect(UpstreamConfiguration.withoutUserInfo("ws://127.0.0.1:8080/api/v4/sync?a=b@c") == "ws://127.0.0.1:8080/api/v4/sync?a=b@c")
    }

    @Test func subscriptionKeysAreStoredWithoutNUL() {
        let key = SyncSubscription(query: "SELECT * FROM cars", arguments: ["c": "red"], collection: "cars").key
        let stored = UpstreamCore.storageKey(key)
        #expect(!stored.utf8.contains(0))
        #expect(stored == #"["SELECT * FROM cars","{\"c\":\"red\"}"]"#)
    }

    @Test func relayedSubscriptionsLingerAfterTheLastPeerGoes() {
        let a = SyncSubscription(query: "SELECT * FROM a", arguments: [:], collection: "a")
        let b = SyncSubscription(query: "SELECT * FROM b", arguments: [:], collection: "b")
        var r = RelayedSubscriptions()
        r.update([a, b], at: 1000, linger: 500)
        r.update([a], at: 1100, linger: 500)
        #expect(r.relayed == [a, b])
        let early = r.expire(at: 1599)
        #expect(!early)
        r.update([a, b], at: 1590, linger: 500)  // back in time: not dropped
        r.update([], at: 1700, linger: 500)
        let expired = r.expire(at: 2200)
        #expect(expired && r.relayed.isEmpty)
    }
}
