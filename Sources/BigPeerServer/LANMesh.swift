// Two nodes on one ship (docs/LOCAL-NODE.md): `bigpeer serve --lan` browses `_bigpeer._tcp` and
// links with the other nodes of its sync group, one link per pair (`LANLinks`). Of each pair the
// node with the lower peer key dials (`LANLinkRule`) and replicates with the other exactly as
// with an `--upstream`: an `UpstreamReplicator` on `tcp://ADDRESS:PORT` whose row and lease are
// named `lan:<peer key>`; the other serves it as any sync peer. Data flows both ways: the dialler
// uploads every change, and downloads what `--lan-subscribe` and its own peers' subscriptions
// match.
//
// A task marks the dialled nodes' rows seen every `sweepInterval` and deletes the rows of nodes
// not seen for `forgetAfter`, so a node that left for good stops holding the change log back.
//
// **Threading.** Browser events arrive on the mDNS daemon's loop and go to `LANLinks`; `relayed`
// is a mutex held only to swap the set, never across a call into a replicator.

import LANDiscovery
import Logging
import Postgres
import Store
import Synchronization
import SyncPeer
import Upstream

public final class LANMesh: Sendable {
    let configuration: LANMeshConfiguration
    /// The links: one replicator per node this node dials.
    public let links: LANLinks<UpstreamReplicator>
    private let store: DocumentStore
    private let logger: Logger
    /// The union of this node's own sessions' subscriptions, for replicators started later.
    private let relayed: RelayedUnion
    private let sweeping = Mutex<Task<Void, Never>?>(nil)

    /// Starts deciding; links form once browser events arrive (`browse`, or `links.seen` in
    /// tests). Fails on a `--lan-subscribe` that is not a plain SELECT.
    init(configuration: LANMeshConfiguration, rule: LANLinkRule, store: DocumentStore, lockSession: PostgresConfiguration?,
         deviceName: String, presence: PresenceHub?, logger: Logger) throws {
        _ = try UpstreamReplicator.parseSubscriptions(configuration.subscriptions)
        var logger = logger
        logger[metadataKey: "lan"] = "mesh"
        let relayed = RelayedUnion()
        self.configuration = configuration
        self.store = store
        self.logger = logger
        self.relayed = relayed
        links = LANLinks(rule: rule, grace: configuration.grace, tickInterval: configuration.tickInterval, dial: { [logger] neighbour in
            var upstream = UpstreamConfiguration(url: neighbour.url, credentials: configuration.credentials)
            upstream.storageKey = Self.storageKey(neighbour.peerKey)
            upstream.subscriptions = configuration.subscriptions
            upstream.relaySubscriptions = true
            upstream.reconnectMax = configuration.reconnectMax
            upstream.leaseRetryInterval = configuration.leaseRetryInterval
            upstream.deviceName = deviceName
            let replicator: UpstreamReplicator
            do { replicator = try UpstreamReplicator(store: store, configuration: upstream, lockSession: lockSession, logger: logger) } catch {
                logger.error("cannot link with a LAN node", metadata: ["peer": "\(neighbour.peerKey)", "url": "\(neighbour.url)", "error": "\(error)"])
                return nil
            }
            replicator.relay(relayed.value)
            presence?.carryLANLink(replicator)
            logger.notice("linking with a LAN node", metadata: ["peer": "\(neighbour.peerKey)", "name": "\(neighbour.name)", "url": "\(neighbour.url)"])
            await Self.markSeen([neighbour.peerKey], store: store, logger: logger)
            return replicator
        }, hangUp: { [logger] replicator in
            logger.notice("LAN link ended", metadata: ["url": "\(replicator.configuration.url)"])
            await replicator.stop()
        })
        let task = Task { [weak self] in
            while !Task.isCancelled {
                guard let interval = await self?.sweep() else { return }
                try? await Task.sleep(for: interval)
            }
        }
        sweeping.withLock { $0 = task }
    }

    /// Browses `_bigpeer._tcp` on `daemon` (the node's advertiser's) and links as nodes appear.
    func browse(on daemon: MDNSDaemon) async throws {
        try await links.browse(on: daemon)
    }

    /// The union of this node's own sessions' subscriptions: every dialled node is asked for it.
    func relay(_ subscriptions: Set<SyncSubscription>) {
        relayed.value = subscriptions
        for replicator in links.links { replicator.relay(subscriptions) }
    }

    /// Stops the sweeps and every link (each says `bye`; merges in flight commit).
    public func stop() async {
        let task = sweeping.withLock { $0 }
        task?.cancel()
        await task?.value
        await links.stop()
    }

    /// The row (and lease) of a dialled node.
    static func storageKey(_ peerKey: String) -> String { "lan:\(peerKey)" }

    /// Marks the dialled nodes known now as seen, then deletes the rows of those gone too long;
    /// returns when to sweep again.
    func sweep() async -> Duration {
        await Self.markSeen(links.partners.filter(\.neighbour.dials).map(\.neighbour.peerKey), store: store, logger: logger)
        do {
            let seconds = Double(configuration.forgetAfter / .milliseconds(1)) / 1000
            for key in try await store.forgetDiscoveredUpstreams(notSeenForSeconds: seconds) {
                logger.notice("forgot a LAN node not seen for --lan-forget-after", metadata: ["peer": "\(key)"])
            }
        } catch {
            logger.warning("cannot expire the rows of LAN nodes gone", metadata: ["error": "\(error)"])
        }
        return configuration.sweepInterval
    }

    private static func markSeen(_ peerKeys: [String], store: DocumentStore, logger: Logger) async {
        for key in peerKeys {
            do { try await store.markDiscoveredUpstreamSeen(storageKey(key), peerKey: key) } catch {
                logger.warning("cannot record a LAN node as seen", metadata: ["peer": "\(key)", "error": "\(error)"])
            }
        }
    }
}

/// The last union of subscriptions relayed (a leaf lock).
private final class RelayedUnion: Sendable {
    private let union = Mutex<Set<SyncSubscription>>([])
    var value: Set<SyncSubscription> {
        get { union.withLock { $0 } }
        set { union.withLock { $0 = newValue } }
    }
}
