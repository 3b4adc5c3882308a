// A local node's relayed subscriptions (`--upstream-relay-subscriptions`, docs/LOCAL-NODE.md):
// the union of what this server's own sync sessions subscribe to, handed to the upstream
// replicator as sessions subscribe, unsubscribe and go.
//
//   session step (SyncConnection.deliver) ──changed(id, version, set)──▶ SubscriptionUnion ─┐
//   socket closed (SyncSessionRegistry.remove) ──closed(id)──────────────▶     (Mutex)     │
//                              one flush per `interval` at most ◀───────────────────────────┘
//                              └──▶ relay(union) (UpstreamReplicator.relay), no lock held

import Sync
import Synchronization
import SyncPeer

/// The sessions' subscriptions and their union: pure, stepped under `SubscriptionRelay`'s lock.
///
/// Each subscription is counted by the sessions holding it, so a session's change costs the
/// size of that session's set, not of the union. A burst of changes is flushed once: the first
/// change asks for a flush (`scheduled`), later ones only mark the union `pending`, and the flush
/// relays the union only when it differs from what was relayed last.
struct SubscriptionUnion {
    /// Per open session: the newest version of its set seen, and the set.
    private var sessions: [UInt64: (version: UInt64, subscriptions: Set<SyncSubscription>)] = [:]
    /// How many open sessions hold each subscription (never 0: absent instead).
    private var holders: [SyncSubscription: Int] = [:]
    /// What the last flush relayed.
    private(set) var relayed: Set<SyncSubscription> = []
    /// A change came after the last `take`.
    private var pending = false
    /// A flush is scheduled or running.
    private(set) var scheduled = false

    var union: Set<SyncSubscription> { Set(holders.keys) }

    /// A session opened (before it can subscribe).
    mutating func opened(_ session: UInt64) {
        if sessions[session] == nil { sessions[session] = (0, []) }
    }

    /// A session's accepted subscriptions are now `subscriptions` (as of its `version`). Ignored
    /// for a session that is not open (it went meanwhile) and for an older version than seen.
    /// Returns true when the caller must schedule a flush.
    mutating func changed(_ session: UInt64, version: UInt64, _ subscriptions: Set<SyncSubscription>) -> Bool {
        guard let old = sessions[session], version > old.version else { return false }
        sessions[session] = (version, subscriptions)
        return replace(old.subscriptions, with: subscriptions)
    }

    /// A session went: its subscriptions no longer count. Returns true when the caller must
    /// schedule a flush.
    mutating func closed(_ session: UInt64) -> Bool {
        guard let old = sessions.removeValue(forKey: session) else { return false }
        return replace(old.subscriptions, with: [])
    }

    /// The union to relay now, if it differs from the last one relayed. The flush stays
    /// scheduled until `flushed`.
    mutating func take() -> Set<SyncSubscription>? {
        pending = false
        let now = union
        guard now != relayed else { return nil }
        relayed = now
        return now
    }

    /// The flush relayed what `take` gave it. Returns true when a change came meanwhile: the
    /// caller schedules the next flush (still `scheduled`, so no other caller does).
    mutating func flushed() -> Bool {
        if pending { return true }
        scheduled = false
        return false
    }

    private mutating func replace(_ old: Set<SyncSubscription>, with new: Set<SyncSubscription>) -> Bool {
        for gone in old.subtracting(new) {
            if let n = holders[gone], n > 1 { holders[gone] = n - 1 } else { holders[gone] = nil }
        }
        for added in new.subtracting(old) { holders[added, default: 0] += 1 }
        guard old != new else { return false }
        pending = true
        if scheduled { return false }
        scheduled = true
        return true
    }
}

/// Keeps the upstream replicator told the union of this server's sync sessions' subscriptions
/// (`SubscriptionUnion`), at most once per `interval`: a thousand peers connecting at once make
/// one resubscription upstream, not a thousand.
///
/// **Threading.** `opened`, `changed` and `closed` may come from any thread (a session's step
/// runs on whichever thread brings its input); each takes the leaf lock `state` for work bounded
/// by one session's subscriptions. `relay` is called by the flush task with no lock held.
final class SubscriptionRelay: Sendable {
    private let state = Mutex(SubscriptionUnion())
    private let interval: Duration
    private let relay: @Sendable (Set<SyncSubscription>) -> Void

    init(interval: Duration = .milliseconds(100), relay: @escaping @Sendable (Set<SyncSubscription>) -> Void) {
        self.interval = interval
        self.relay = relay
    }

    func opened(_ session: UInt64) { state.withLock { $0.opened(session) } }

    /// What a session's `SyncConnection` calls after a step that changed its subscriptions: each
    /// as the peer named it (query text and arguments) with the collection the session parsed.
    func observer(session: UInt64) -> @Sendable (_ version: UInt64, _ accepted: [SubscriptionQuery]) -> Void {
        { [self] version, accepted in
            changed(session, version: version, Set(accepted.map {
                SyncSubscription(query: $0.text, arguments: $0.arguments, collection: $0.collection)
            }))
        }
    }

    func changed(_ session: UInt64, version: UInt64, _ subscriptions: Set<SyncSubscription>) {
        if state.withLock({ $0.changed(session, version: version, subscriptions) }) { scheduleFlush() }
    }

    func closed(_ session: UInt64) {
        if state.withLock({ $0.closed(session) }) { scheduleFlush() }
    }

    private func scheduleFlush() {
        let interval = self.interval
        Task { [self] in
            try? await Task.sleep(for: interval)
            flush()
        }
    }

    private func flush() {
        if let union = state.withLock({ $0.take() }) { relay(union) }
        if state.withLock({ $0.flushed() }) { scheduleFlush() }
    }
}
