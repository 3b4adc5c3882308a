import Auth
import Logging
import Sockets
import Sync
import SyncProtocol
import Synchronization

/// The sync sessions of one instance: the session cap (`--max-sync-sessions`, PROTOCOL.md §4.2:
/// a peer beyond it is refused with 4003 after its credentials check), the credentials each
/// session runs on, and the periodic re-check that ends sessions whose API key was revoked or
/// whose scopes changed (PROTOCOL.md §4.1.1).
///
/// **Re-checks are per key, not per session.** Every `interval` the monitor groups the admitted
/// sessions by API key and verifies each distinct key once (through the `Authenticator`'s cache,
/// with entries at most `cacheTTL - interval` old), so a revocation reaches every session within
/// the REST bound (`cacheTTL`, 5 s) and a thousand sessions of one key cost one lookup per period.
/// JWTs are not re-checked: they cannot be revoked, and their expiry is a timer in the session.
final class SyncSessionRegistry: Sendable {
    struct Entry {
        let connection: SyncConnection
        let outbox: SyncOutbox
        /// Counted against the cap (the credentials were accepted).
        var admitted = false
        var credentials: SyncCredentials?
        /// The session's `credentialEpoch` these credentials belong to.
        var epoch: UInt64 = 0
        var permissions: SyncPermissions?
        /// The identity it was admitted under (counted against `maxSessionsPerPrincipal`).
        var admittedAs: String?
    }

    let maxSessions: Int
    /// Told each session's subscriptions when this server relays them upstream; nil otherwise.
    let relay: SubscriptionRelay?
    /// Sessions admitted under one identity (API key id, `jwt:<sub>`) at once (`--max-sync-sessions-per-key`).
    let maxSessionsPerPrincipal: Int
    private let state = Mutex<(entries: [UInt64: Entry], admitted: Int, byPrincipal: [String: Int])>(([:], 0, [:]))
    private let numbers = Atomic<UInt64>(0)
    private let monitor = Mutex<Task<Void, Never>?>(nil)

    init(maxSessions: Int, maxSessionsPerPrincipal: Int? = nil, relay: SubscriptionRelay? = nil) {
        self.maxSessions = max(0, maxSessions)
        self.maxSessionsPerPrincipal = max(0, maxSessionsPerPrincipal ?? maxSessions)
        self.relay = relay
    }

    /// A number for a new session, unique on this instance whatever its link.
    func nextNumber() -> UInt64 { numbers.add(1, ordering: .relaxed).newValue }

    /// Sessions whose credentials were accepted and that are still open.
    var admittedCount: Int { state.withLock { $0.admitted } }

    func register(_ id: UInt64, connection: SyncConnection, outbox: SyncOutbox) {
        state.withLock { $0.entries[id] = Entry(connection: connection, outbox: outbox) }
        relay?.opened(id)
    }

    /// The socket closed: the session's slot is free again, and its subscriptions are no longer
    /// relayed. A session that had a lot queued asks for its memory to go back to the kernel
    /// (glibc keeps freed heap otherwise: `HeapTrim`).
    func remove(_ id: UInt64) {
        relay?.closed(id)
        let removed = state.withLock { s -> Entry? in
            let e = s.entries.removeValue(forKey: id)
            if e?.admitted == true { s.admitted -= 1 }
            if let principal = e?.admittedAs {
                let left = (s.byPrincipal[principal] ?? 1) - 1
                s.byPrincipal[principal] = left > 0 ? left : nil
            }
            return e
        }
        if let removed, removed.outbox.peakQueuedBytes >= Self.trimAfterQueuedBytes { HeapTrim.request() }
    }

    /// A closed session that once queued this much makes the heap worth trimming.
    static let trimAfterQueuedBytes = 256 << 10

    enum Admission { case admitted, full, fullForPrincipal, closed }

    /// Takes a slot for a session whose credentials were accepted: `.full` at the cap,
    /// `.fullForPrincipal` when its identity holds `maxSessionsPerPrincipal` already (one leaked
    /// or hostile key cannot take every slot), `.closed` when its socket closed meanwhile.
    func admit(_ id: UInt64, credentials: SyncCredentials?, permissions: SyncPermissions) -> Admission {
        state.withLock { s in
            guard var e = s.entries[id], !e.admitted else { return .closed }
            guard s.admitted < maxSessions else { return .full }
            if let principal = permissions.principal {
                guard s.byPrincipal[principal, default: 0] < maxSessionsPerPrincipal else { return .fullForPrincipal }
                s.byPrincipal[principal, default: 0] += 1
                e.admittedAs = principal
            }
            e.admitted = true
            e.credentials = credentials
            e.permissions = permissions
            s.entries[id] = e
            s.admitted += 1
            return .admitted
        }
    }

    /// The peer's `auth` was accepted: later re-checks concern these credentials.
    func replaceCredentials(_ id: UInt64, _ credentials: SyncCredentials, epoch: UInt64, permissions: SyncPermissions) {
        state.withLock { s in
            guard var e = s.entries[id], epoch > e.epoch else { return }
            e.credentials = credentials
            e.epoch = epoch
            e.permissions = permissions
            s.entries[id] = e
        }
    }

    /// The sessions whose credentials were accepted (remote queries go to these).
    func admittedConnections() -> [SyncConnection] {
        state.withLock { s in s.entries.values.filter(\.admitted).map(\.connection) }
    }

    /// Per open session: bytes waiting for its socket now, and the most there ever were.
    func queueStatistics() -> [(queued: Int, peak: Int)] {
        state.withLock { s in s.entries.values.map { ($0.outbox.queuedBytes, $0.outbox.peakQueuedBytes) } }
    }

    // MARK: - Re-checking credentials

    func startMonitor(_ authentication: SyncAuthentication, interval: Duration, logger: Logger) {
        guard !authentication.keys.isInsecureDevelopment else { return }
        let maxAge = max(.zero, authentication.keys.cacheTTL - interval)
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self, !Task.isCancelled else { return }
                await self.recheck(authentication, maxAge: maxAge, logger: logger)
            }
        }
        monitor.withLock { $0 = task }
    }

    func stopMonitor() { monitor.withLock { $0?.cancel(); $0 = nil } }

    /// One round: every distinct API key of an admitted session verified once; sessions whose key
    /// is refused now are closed (4001), sessions whose key's scopes changed get the new ones.
    func recheck(_ authentication: SyncAuthentication, maxAge: Duration, logger: Logger) async {
        typealias Member = (id: UInt64, connection: SyncConnection, epoch: UInt64, permissions: SyncPermissions?)
        // Grouped by the key's bytes: String keys would compare canonically equivalent texts equal.
        var byKey: [[UInt8]: (key: String, members: [Member])] = [:]
        state.withLock { s in
            for (id, e) in s.entries where e.admitted {
                guard case .apiKey(let key)? = e.credentials else { continue }
                byKey[Array(key.utf8), default: (key, [])].members.append((id, e.connection, e.epoch, e.permissions))
            }
        }
        for (_, group) in byKey {
            let decision = await authentication.decide(.apiKey(group.key), maxAge: maxAge)
            for m in group.members {
                switch decision {
                case .refuse(code: .tryAgainLater, _):
                    continue  // the database cannot tell now; the session goes on until it can
                case .refuse(_, let reason):
                    logger.notice("sync session closed: credentials no longer valid", metadata: [
                        "principal": "\(m.permissions?.principal ?? "-")", "reason": "\(reason)"])
                    m.connection.credentialsChecked(decision, epoch: m.epoch)
                case .accept(let granted):
                    guard let old = m.permissions, old.read != granted.read || old.write != granted.write || old.readRules != granted.readRules
                                               || old.writeRules != granted.writeRules else { continue }
                    state.withLock { s in
                        if s.entries[m.id]?.epoch == m.epoch { s.entries[m.id]?.permissions = granted }
                    }
                    m.connection.credentialsChecked(decision, epoch: m.epoch)
                }
            }
        }
    }
}
