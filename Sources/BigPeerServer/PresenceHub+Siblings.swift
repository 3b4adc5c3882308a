// The instances of one database share their peers through the `bigpeer_presence` table
// (migrations/0011_presence.sql; docs/LOCAL-NODE.md "Presence"): every `interval` an instance
// writes its own links and its direct peers' records, valid three intervals, and reads the other
// instances' rows. Their records enter its gossip through a sibling link (forwarded to its own
// peers like any record), their links join its own record's. A row that is not rewritten expires,
// and with it that instance's peers; an instance that shuts down deletes its row.

import Logging
import Store
import SyncProtocol
import Synchronization

extension PresenceHub {
    /// The gossip link id of the database (sessions are numbered from 1; the upstream is `.max`).
    static let siblingLink = UInt64.max - 1

    func shareThroughDatabase(_ store: DocumentStore, instance: String, interval: Duration = .seconds(5), logger: Logger) {
        withGossip { g, now in g.siblingLinkUp(Self.siblingLink, now: now) }
        let ttl = interval * 3
        let ttlSeconds = Int(ttl.components.seconds)
        let task = Task { [weak self] in
            var failing = false
            while !Task.isCancelled {
                guard let self else { return }
                do throws(StoreError) {
                    try await self.exchange(store, instance: instance, ttlSeconds: ttlSeconds)
                    failing = false
                } catch {
                    if !failing { logger.warning("presence: cannot share peers with the other instances", metadata: ["error": "\(error)"]) }
                    failing = true
                }
                try? await Task.sleep(for: interval)
            }
        }
        siblings.withLock { $0 = (task, { try? await store.withdrawPresence(instance: instance) }) }
    }

    /// One heartbeat: this instance's row written, the others' taken in.
    func exchange(_ store: DocumentStore, instance: String, ttlSeconds: Int) async throws(StoreError) {
        let mine = withGossip { g, now in g.siblingSnapshot(now: now, ttlMillis: UInt64(ttlSeconds) * 1000) }
        try await store.publishPresence(instance: instance, records: SyncMessage.presence(mine).encode(), ttlSeconds: ttlSeconds)
        var limits = SyncLimits.default
        limits.maxPresenceRecords = Int.max  // a row holds every direct peer of an instance
        limits.maxPresenceLinks = Int.max  // and every link of that instance
        limits.maxPresenceMetadataBytes = limits.maxMetadataBytes  // a handshake's metadata, for peers without presence
        var links: [PresenceLink] = []
        var records: [PresenceRecord] = []
        for row in try await store.otherInstancesPresence(than: instance) {
            guard case .presence(let got)? = try? SyncMessageDecoder.decode(row, limits: limits) else { continue }
            for r in got {
                if r.peerKey == peerKey { links += r.links } else { records.append(r) }
            }
        }
        withGossip { g, now in
            g.setSiblingLinks(links, now: now)
            g.receive(records, from: Self.siblingLink, now: now)
        }
    }
}
