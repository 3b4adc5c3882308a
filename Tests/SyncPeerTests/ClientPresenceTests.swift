// The peer side of presence (PROTOCOL.md §4.14): what the server sends is handed to the driver,
// and the peer's own records go out only once the session is ready.
@testable import SyncPeer
import SyncProtocol
import Testing

@Suite struct ClientPresenceTests {
    typealias Session = SyncClientSessionTests.SyncClientSession
    static let record = PresenceRecord(peerKey: [9], epoch: 1, seq: 1, ttlMillis: 60_000, deviceName: "node")

    @Test func presenceFromTheServer_isHandedOn_andOwnRecordsWaitForWelcome() {
        var s = Session(configuration: SyncClientSessionTests.config())
        _ = s.start(now: 0)
        #expect(s.presence([Self.record]).isEmpty, "nothing before welcome")
        var ready = SyncClientSessionTests.ready()
        #expect(ready.receive(SyncMessage.presence([Self.record]).encode(), now: 2) == [.presence([Self.record])])
        #expect(SyncClientSessionTests.sent(ready.presence([Self.record])) == [.presence([Self.record])])
        #expect(ready.state == .ready)
    }
}
