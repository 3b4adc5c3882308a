import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// Credentials nearing expiry, on a manual clock (PROTOCOL.md §4.13): `welcome` and `auth_ok` say
/// how long they stay valid, a peer with the `renew` capability is told min(60 s, 10 %) before
/// the end, an `auth` in time carries the session past the first deadline, and a session
/// without one closes with 4001 exactly at it.
@Suite struct SyncSessionRenewalTests {
    /// The heartbeat is out of the way: these tests move the clock by minutes without traffic.
    static func harness() -> SessionHarness { SessionHarness(configure: { $0.heartbeatMillis = 1 << 40 }) }

    static func hello(renews: Bool) -> Hello {
        var h = SessionHarness.hello()
        h.capabilities = renews ? [SyncCapability.renew] : []
        return h
    }

    static func grant(_ millis: UInt64?, info: Value? = nil) -> AuthDecision {
        .accept(SyncPermissions(read: .all, write: .all, validForMillis: millis, clientInfo: info))
    }

    @Test func renew_comesAMinuteBeforeAnHoursCredentialsEnd_andAuthCarriesTheSessionPastThem() {
        var h = Self.harness()
        _ = h.receive(.hello(Self.hello(renews: true)))
        let welcome = sent(h.feed(.authenticated(Self.grant(3_600_000, info: ["plan": "field"]))))
        guard case .welcome(let w)? = welcome.first else { Issue.record("\(welcome)"); return }
        #expect(w.credentials == CredentialStatus(validForMillis: 3_600_000, clientInfo: ["plan": "field"]))
        #expect(h.session.nextDeadline == h.now + 3_540_000)

        #expect(sent(h.advance(3_539_999)).isEmpty)
        #expect(sent(h.advance(1)) == [.credentialsExpiring(inMillis: 60_000)])
        #expect(sent(h.advance(30_000)).isEmpty, "one notice per credentials")

        #expect(h.receive(.refreshAuth(.jwt("fresh"))) == [.reauthenticate(.jwt("fresh"), epoch: 1)])
        let ok = sent(h.feed(.reauthenticated(Self.grant(3_600_000, info: ["plan": "fleet"]), epoch: 1)))
        #expect(ok == [.authRefreshed(CredentialStatus(validForMillis: 3_600_000, clientInfo: ["plan": "fleet"]))])

        // Past the first credentials' end the session runs on; the new ones get their own notice.
        let a = h.advance(40_000)
        #expect(closeCode(a) == nil && h.session.state == .ready, "\(a)")
        #expect(sent(h.advance(3_540_000 - 40_000 - 1)).isEmpty)
        #expect(sent(h.advance(1)) == [.credentialsExpiring(inMillis: 60_000)])
    }

    @Test func withoutAuth_theSessionClosesWith4001_exactlyAtExpiry_afterTheNotice() {
        var h = Self.harness()
        _ = h.receive(.hello(Self.hello(renews: true)))
        _ = h.feed(.authenticated(Self.grant(300_000)))  // 5 minutes: the notice comes 30 s ahead
        #expect(sent(h.advance(269_999)).isEmpty)
        #expect(sent(h.advance(1)) == [.credentialsExpiring(inMillis: 30_000)])
        #expect(closeCode(h.advance(29_999)) == nil)
        #expect(h.advance(1) == [.close(code: 4001, reason: "credentials expired")])
    }

    @Test func aPeerWithoutRenew_hearsTheTtl_butNoNotice_andCredentialsThatDoNotExpire_haveNoTtl() {
        var h = Self.harness()
        _ = h.receive(.hello(Self.hello(renews: false)))
        guard case .welcome(let w)? = sent(h.feed(.authenticated(Self.grant(300_000)))).first else { Issue.record("no welcome"); return }
        #expect(w.credentials.validForMillis == 300_000 && w.credentials.clientInfo == nil)
        #expect(h.session.nextDeadline == h.now + 300_000)
        #expect(sent(h.advance(299_999)).isEmpty)
        #expect(closeCode(h.advance(1)) == 4001)

        var forever = Self.harness()
        _ = forever.receive(.hello(Self.hello(renews: true)))
        guard case .welcome(let v)? = sent(forever.feed(.authenticated(Self.grant(nil)))).first else { Issue.record("no welcome"); return }
        #expect(v.credentials == CredentialStatus())
        #expect(sent(forever.advance(10_000_000)).isEmpty)
    }

    @Test func theLead_isATenthOfTheLifetime_atMostAMinute() {
        #expect(SyncSession.renewalLead(lifetimeMillis: 3_600_000) == 60_000)
        #expect(SyncSession.renewalLead(lifetimeMillis: 600_000) == 60_000)
        #expect(SyncSession.renewalLead(lifetimeMillis: 300_000) == 30_000)
        #expect(SyncSession.renewalLead(lifetimeMillis: 5) == 0)
    }
}
