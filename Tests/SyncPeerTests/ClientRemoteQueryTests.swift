// The peer side of remote queries (PROTOCOL.md §4.15), sans-I/O: what `hello.caps` announces, a
// refusing peer's answer, and an allowing peer's round trip through its driver.
@testable import SyncPeer
import SyncProtocol
import Testing
import Values

@Suite struct ClientRemoteQueryTests {
    typealias T = SyncClientSessionTests
    static let query = RemoteQuery(id: 3, statement: "SELECT * FROM cars", timeoutMillis: 1000, maxResultBytes: 1024)

    static func session(_ support: RemoteQuerySupport) -> T.SyncClientSession {
        var c = T.config()
        c.remoteQueries = support
        return T.ready(c)
    }

    static func hello(_ support: RemoteQuerySupport) -> Hello? {
        var c = T.config()
        c.remoteQueries = support
        var s = T.SyncClientSession(configuration: c)
        if case .hello(let h)? = T.sent(s.start(now: 0)).first { return h }
        return nil
    }

    @Test func hello_announcesTheCapability_unlessUnsupported() {
        #expect(Self.hello(.unsupported)?.capabilities == [SyncCapability.gone])
        #expect(Self.hello(.refused)?.capabilities == [SyncCapability.remoteQuery, SyncCapability.gone])
        #expect(Self.hello(.allowed)?.capabilities == [SyncCapability.remoteQuery, SyncCapability.gone])
    }

    @Test func peerThatDoesNotAllow_answersNotAllowed_withoutTheDriver() {
        for support in [RemoteQuerySupport.refused, .unsupported] {
            var s = Self.session(support)
            let actions = s.receive(SyncMessage.query(Self.query).encode(), now: 10)
            #expect(T.sent(actions) == [.result(RemoteQueryResult(id: 3, outcome: .failure(.notAllowedByPeer)))])
            #expect(!actions.contains { if case .remoteQuery = $0 { true } else { false } })
            #expect(s.state == .ready)
        }
    }

    @Test func allowingPeer_handsTheQueryToItsDriver_andSendsTheAnswerOnce() {
        var s = Self.session(.allowed)
        #expect(s.receive(SyncMessage.query(Self.query).encode(), now: 10) == [.remoteQuery(Self.query)])
        let answer = s.answerQuery(id: 3, .success(["a", "b"]), warnings: ["w"], now: 25)
        #expect(T.sent(answer) == [.result(RemoteQueryResult(id: 3, outcome: .success(["a", "b"]), warnings: ["w"], elapsedMillis: 15))])
        #expect(s.answerQuery(id: 3, .success([]), now: 30).isEmpty, "answered already")
    }

    @Test func answer_isCutToTheQuerysMax() throws {
        var s = Self.session(.allowed)
        _ = s.receive(SyncMessage.query(Self.query).encode(), now: 0)
        let items: [Value] = (0..<50).map { .string("item-\($0)-" + String(repeating: "x", count: 40)) }
        let answer = s.answerQuery(id: 3, .success(items), now: 1)
        guard case .send(let bytes)? = answer.first else { Issue.record("\(answer)"); return }
        #expect(bytes.count <= 1024)
        guard case .result(let r) = try SyncMessageDecoder.decode(bytes), case .success(let kept) = r.outcome else { Issue.record("not a result"); return }
        #expect(kept == Array(items.prefix(kept.count)) && kept.count < items.count)
        #expect(r.warnings.first?.hasPrefix("result truncated to \(kept.count) of 50 items") == true)
    }

    @Test func resultFromTheServer_isAViolation() {
        var s = Self.session(.allowed)
        let actions = s.receive(SyncMessage.result(RemoteQueryResult(id: 1, outcome: .success([]))).encode(), now: 1)
        #expect(T.closeCode(actions) == SyncCloseCode.protocolViolation.rawValue)
    }
}
