// What a session tells its peer about the credentials it runs on (PROTOCOL.md §4.13): how long
// they stay valid and the login's `clientInfo` (in `welcome` and `auth_ok`), and, to a peer that
// asked for it (`hello.caps` `renew`), a `renew` notice some time before they expire, so it can
// send fresh ones with `auth` without losing the session.
//
//   accepted (lifetime L) ──► … ──► deadline − min(60 s, L / 10): `renew` (once per credentials)
//                                   ──► deadline: close 4001 "credentials expired", unless `auth`
//                                       brought new credentials (a new epoch, a new deadline)

import SyncProtocol

extension SyncSession {
    /// How long before the deadline the `renew` notice goes out: a tenth of the credentials'
    /// lifetime, at most a minute (a token of one hour hears at 59 min, one of 5 min at 4.5 min).
    static func renewalLead(lifetimeMillis: UInt64) -> UInt64 { min(60_000, lifetimeMillis / 10) }

    /// The status of the session's credentials as of `now` (`welcome.ttl`/`info`, `auth_ok`).
    func credentialStatus(now: UInt64) -> CredentialStatus {
        CredentialStatus(validForMillis: credentialDeadline.map { $0 > now ? $0 - now : 0 }, clientInfo: permissions.clientInfo)
    }

    /// New credentials were accepted (`hello` or `auth`): their notice is due a lead before their deadline.
    mutating func scheduleRenewal(_ granted: SyncPermissions) {
        renewalLeadMillis = granted.validForMillis.map { Self.renewalLead(lifetimeMillis: $0) }
    }

    /// When the `renew` notice of the current credentials is due; nil: none will be sent (they do
    /// not expire, the peer did not ask for notices, it has been sent, an `auth` is being checked,
    /// or the session waits detached for its peer to resume it).
    var renewalDue: UInt64? {
        guard let credentialDeadline, let lead = renewalLeadMillis, renewalSentForEpoch != credentialEpoch, refreshInFlight == nil, !detached,
              peer?.capabilities.contains(SyncCapability.renew) == true else { return nil }
        return credentialDeadline - min(credentialDeadline, lead)
    }

    /// Sends `renew` when it is due (from `tick`, before the deadline check closes the session).
    mutating func sendRenewalIfDue(now: UInt64, into out: inout [SyncSessionAction]) {
        guard let due = renewalDue, now >= due, let credentialDeadline, now < credentialDeadline else { return }
        renewalSentForEpoch = credentialEpoch
        send(.credentialsExpiring(inMillis: credentialDeadline - now), into: &out)
    }
}
