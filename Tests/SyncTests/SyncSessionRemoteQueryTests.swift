import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// The server side of remote queries (PROTOCOL.md §4.15) on a manual clock: every `.sendQuery` is
/// answered exactly once, by the peer or by the session.
@Suite struct SyncSessionRemoteQueryTests {
    static func ready(capabilities: [String] = [SyncCapability.remoteQuery],
                      configure: (inout SyncSession.Configuration) -> Void = { _ in }) -> SessionHarness {
        var h = SessionHarness(configure: configure)
        var hello = SessionHarness.hello()
        hello.capabilities = capabilities
        _ = h.receive(.hello(hello))
        _ = h.feed(.authenticated(.accept(.everything)))
        #expect(h.session.state == .ready)
        return h
    }

    static func query(_ id: UInt32, timeout: UInt64 = 5_000, max: UInt64 = 1 << 20) -> RemoteQuery {
        RemoteQuery(id: id, statement: "SELECT * FROM cars", timeoutMillis: timeout, maxResultBytes: max)
    }

    func answers(_ actions: [SyncSessionAction]) -> [RemoteQueryResult] {
        actions.compactMap { if case .queryAnswered(let r) = $0 { r } else { nil } }
    }

    func errorCode(_ r: RemoteQueryResult?) -> RemoteQueryError.Code? {
        if case .failure(let e)? = r?.outcome { e.code } else { nil }
    }

    @Test func query_isSent_andThePeersResultIsRouted() {
        var h = Self.ready()
        let a = h.feed(.sendQuery(Self.query(7)))
        #expect(sent(a) == [.query(Self.query(7))])
        #expect(answers(a).isEmpty)
        #expect(h.session.outstandingQueryCount == 1)
        let result = RemoteQueryResult(id: 7, outcome: .success([["_id": "car-1"]]), warnings: ["w"], elapsedMillis: 3)
        let b = h.receive(.result(result))
        #expect(answers(b) == [result])
        #expect(h.session.outstandingQueryCount == 0)
        #expect(h.session.state == .ready)
    }

    @Test func peerWithoutTheCapability_isAnsweredUnsupported_andSentNothing() {
        var h = Self.ready(capabilities: [])
        let a = h.feed(.sendQuery(Self.query(1)))
        #expect(sent(a).isEmpty)
        #expect(errorCode(answers(a).first) == .unsupported)
    }

    @Test func sessionNotOpen_answersSessionClosed() {
        var h = SessionHarness()
        #expect(errorCode(answers(h.feed(.sendQuery(Self.query(1)))).first) == .sessionClosed, "before hello")
        var g = Self.ready()
        _ = g.feed(.transportClosed)
        #expect(errorCode(answers(g.feed(.sendQuery(Self.query(2)))).first) == .sessionClosed, "after the end")
    }

    @Test func noAnswerWithinTheTimeout_isATimeout_andALateResultIsDropped() {
        var h = Self.ready()
        _ = h.feed(.sendQuery(Self.query(1, timeout: 2_000)))
        #expect(h.session.nextDeadline <= h.now + 2_000)
        #expect(answers(h.advance(1_999)).isEmpty)
        _ = h.receive(.pong(1))  // keeps the session alive; not an answer
        let a = h.advance(1)
        let r = answers(a).first
        #expect(errorCode(r) == .timeout)
        #expect(r?.elapsedMillis == 2_000)
        #expect(h.session.outstandingQueryCount == 0)
        let late = h.receive(.result(RemoteQueryResult(id: 1, outcome: .success([]))))
        #expect(answers(late).isEmpty)
        #expect(closeCode(late) == nil && h.session.state == .ready)
    }

    @Test func sessionEnd_answersEveryOutstandingQuery() {
        var bye = Self.ready()
        _ = bye.feed(.sendQuery(Self.query(1)))
        _ = bye.feed(.sendQuery(Self.query(2)))
        let a = bye.receive(.bye(code: 1000, reason: ""))
        #expect(answers(a).map(\.id) == [1, 2], "the peer said bye")
        #expect(answers(a).allSatisfy { errorCode($0) == .sessionClosed })
        var h = Self.ready()
        _ = h.feed(.sendQuery(Self.query(3)))
        #expect(answers(h.feed(.transportClosed)).map(\.id) == [3], "the link went away")
        var v = Self.ready()
        _ = v.feed(.sendQuery(Self.query(4)))
        let violation = v.feed(.received([0xFF]))
        #expect(closeCode(violation) == SyncCloseCode.protocolViolation.rawValue)
        #expect(answers(violation).map(\.id) == [4], "closed for a violation")
    }

    @Test func outstandingQueries_areCappedPerSession() {
        var h = Self.ready { $0.maxOutstandingQueries = 2 }
        #expect(sent(h.feed(.sendQuery(Self.query(1)))).count == 1)
        #expect(sent(h.feed(.sendQuery(Self.query(2)))).count == 1)
        let third = h.feed(.sendQuery(Self.query(3)))
        #expect(sent(third).isEmpty)
        #expect(errorCode(answers(third).first) == .busy)
        _ = h.receive(.result(RemoteQueryResult(id: 1, outcome: .success([]))))
        #expect(sent(h.feed(.sendQuery(Self.query(4)))).count == 1, "room again after an answer")
        #expect(errorCode(answers(h.feed(.sendQuery(Self.query(2)))).first) == .busy, "an id outstanding already")
    }

    @Test func resultLargerThanTheQuerysMax_isReportedTooLarge() {
        var h = Self.ready()
        _ = h.feed(.sendQuery(Self.query(1, max: 1024)))
        let big = RemoteQueryResult(id: 1, outcome: .success([.string(String(repeating: "x", count: 2000))]))
        let a = h.receive(.result(big))
        #expect(errorCode(answers(a).first) == .tooLarge)
        #expect(h.session.state == .ready)
        // What the peer sends when it cuts its answer to fit passes.
        _ = h.feed(.sendQuery(Self.query(2, max: 1024)))
        let cut = RemoteQueryResult(id: 2, outcome: .success([.string(String(repeating: "x", count: 2000)), "small"])).fitting(maxBytes: 1024)
        #expect(answers(h.receive(.result(cut))) == [cut])
    }

    @Test func querysMax_isBoundedByTheServersMessageLimit() {
        var h = Self.ready()
        let a = h.feed(.sendQuery(Self.query(1, max: UInt64.max)))
        guard case .query(let q)? = sent(a).first else { Issue.record("\(a)"); return }
        #expect(q.maxResultBytes == UInt64(SyncLimits.default.maxMessageSize))
    }

    @Test func resultForAnUnknownQuery_isIgnored() {
        var h = Self.ready()
        let a = h.receive(.result(RemoteQueryResult(id: 99, outcome: .success([]))))
        #expect(a.isEmpty)
        #expect(h.session.state == .ready)
    }

    @Test func queryFromThePeer_isAViolation() {
        var h = Self.ready()
        #expect(closeCode(h.receive(.query(Self.query(1)))) == SyncCloseCode.protocolViolation.rawValue)
    }
}
