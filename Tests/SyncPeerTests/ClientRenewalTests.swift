@testable import SyncPeer
import SyncProtocol
import Testing
import Values

/// The peer side of credential renewal (PROTOCOL.md §4.13): a session that renews asks for
/// `renew` in `hello.caps`, hands the driver `credentialsExpiring` when it comes, and the
/// `auth_ok` of the fresh credentials with their status.
@Suite struct ClientRenewalTests {
    typealias Session = SyncClientSession<TestUpload>

    @Test func aRenewingSession_asksForRenew_andPassesTheNoticeAndTheNewStatusOn() throws {
        var c = SyncClientSessionTests.config()
        c.renewsCredentials = true
        var s = Session(configuration: c)
        guard case .hello(let h)? = SyncClientSessionTests.sent(s.start(now: 0)).first else { Issue.record("no hello"); return }
        #expect(h.capabilities.contains("renew"))
        var welcome = SyncClientSessionTests.welcome
        welcome.credentials = CredentialStatus(validForMillis: 300_000, clientInfo: ["plan": "field"])
        #expect(s.receive(SyncMessage.welcome(welcome).encode(), now: 1) == [.connected(welcome)])
        #expect(s.receive(SyncMessage.credentialsExpiring(inMillis: 30_000).encode(), now: 2) == [.credentialsExpiring(inMillis: 30_000)])
        #expect(SyncClientSessionTests.sent(s.refreshCredentials(.apiKey("k_2"))) == [.refreshAuth(.apiKey("k_2"))])
        let status = CredentialStatus(validForMillis: 300_000, clientInfo: ["plan": "fleet"])
        #expect(s.receive(SyncMessage.authRefreshed(status).encode(), now: 3) == [.credentialsRefreshed(status)])

        var plain = Session(configuration: SyncClientSessionTests.config())
        guard case .hello(let p)? = SyncClientSessionTests.sent(plain.start(now: 0)).first else { Issue.record("no hello"); return }
        #expect(!p.capabilities.contains("renew"))
    }
}
