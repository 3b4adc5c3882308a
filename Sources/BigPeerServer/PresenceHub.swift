// The presence of one server instance (PROTOCOL.md §4.14, docs/LOCAL-NODE.md "Presence"): its
// `PresenceGossip` with every ready sync session as a link (WebSocket or LAN TCP) and, on a local
// node, the upstream link; what `GET /api/v4/presence` answers.
//
// Threading: the gossip lives under one mutex; sessions call in from their loops (ready,
// received, ended), a timer task ticks it. Messages are handed to the sessions after the lock is
// released (a session's `sendPresence` takes the session's own lock): no lock is held across the two.

import Glibc
import Sync
import SyncPeer
import SyncProtocol
import Synchronization
import Upstream
import Values

final class PresenceHub: Sendable {
    private struct State {
        var gossip: PresenceGossip
        var sessions: [UInt64: SyncConnection] = [:]
        /// Links that are not sync sessions of this server (the upstream link of a local node).
        var senders: [UInt64: @Sendable ([PresenceRecord]) -> Void] = [:]
        /// What the logins of the sessions say about their peers (webhook `identityServiceMetadata`),
        /// kept for a session that moves to another link.
        var identities: [UInt64: [String: Value]] = [:]
    }
    private let state: Mutex<State>
    private let clock: @Sendable () -> UInt64
    /// This server's peer key (what its record and its instances' rows are published under).
    let peerKey: [UInt8]
    private let timer = Mutex<Task<Void, Never>?>(nil)
    /// The next link id for a link to a node found on the LAN (counting down below `upstreamLink`).
    private let lanLinkIDs = Atomic<UInt64>(upstreamLink)
    /// Sharing with the other instances of the database (PresenceHub+Siblings.swift), when started.
    let siblings = Mutex<(task: Task<Void, Never>, withdraw: @Sendable () async -> Void)?>(nil)

    /// `peerKey`: the server's (its site id, 8 bytes big-endian: what it sends as a peer upstream).
    init(peerKey: [UInt8], local: PresenceGossip.LocalInfo, configuration: PresenceGossip.Configuration = .init(),
         clock: @escaping @Sendable () -> UInt64 = SyncConnection.monotonicMillis) {
        self.clock = clock
        self.peerKey = peerKey
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let epoch = UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
        state = Mutex(State(gossip: PresenceGossip(configuration: configuration, peerKey: peerKey, epoch: epoch, local: local, now: clock())))
    }

    /// The peer key of a server with this site id (PROTOCOL.md §4.14).
    static func peerKey(site: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: site >> (56 - 8 * $0)) } }

    /// Ticks the gossip (expiry, refresh, batched sends) until `stop`.
    func start(interval: Duration = .milliseconds(100)) {
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self else { return }
                self.flush()
            }
        }
        timer.withLock { $0 = task }
    }

    func stop() async {
        timer.withLock { $0?.cancel(); $0 = nil }
        if let s = siblings.withLock({ s in defer { s = nil }; return s }) {
            s.task.cancel()
            await s.withdraw()
        }
    }

    /// What session `number` tells the hub; `attach` its connection before the session starts.
    func port(session number: UInt64, type: LinkType) -> SyncConnection.PresencePort {
        SyncConnection.PresencePort(
            ready: { [weak self] hello in self?.linkUp(number, peerKey: hello.peerKey, type: type, peer: DirectPeer(deviceName: hello.deviceName, metadata: hello.metadata)) },
            received: { [weak self] records in self?.received(records, from: number) },
            ended: { [weak self] in self?.linkDown(number) },
            linkType: type,
            moved: { [weak self] hello, moved in
                guard let self else { return }
                let identity = self.state.withLock { $0.identities[number] }
                self.linkUp(number, peerKey: hello.peerKey, type: moved,
                            peer: DirectPeer(deviceName: hello.deviceName, metadata: hello.metadata, identityMetadata: identity))
            },
            identified: { [weak self] metadata in self?.identify(number, metadata) })
    }

    /// Session `number`'s login says this about its peer (nil: nothing): its records show it.
    func identify(_ number: UInt64, _ metadata: [String: Value]?) {
        let now = clock()
        state.withLock { s in
            s.identities[number] = metadata
            s.gossip.identify(number, metadata: metadata, now: now)
        }
        flush()
    }

    func attach(_ number: UInt64, _ connection: SyncConnection) { state.withLock { $0.sessions[number] = connection } }

    /// A link that is not a session of this server (the upstream link): `send` delivers records on it.
    func linkUp(_ id: UInt64, peerKey: [UInt8], type: LinkType, peer: DirectPeer? = nil,
                send: (@Sendable ([PresenceRecord]) -> Void)? = nil) {
        let now = clock()
        state.withLock { s in
            if let send { s.senders[id] = send }
            s.gossip.linkUp(id, peerKey: peerKey, type: type, peer: peer, now: now)
        }
        flush()
    }

    func linkDown(_ id: UInt64) {
        let now = clock()
        state.withLock { s in
            s.sessions[id] = nil
            s.senders[id] = nil
            s.identities[id] = nil
            s.gossip.linkDown(id, now: now)
        }
    }

    func received(_ records: [PresenceRecord], from id: UInt64) {
        let now = clock()
        state.withLock { $0.gossip.receive(records, from: id, now: now) }
        flush()
    }

    /// The link id of the upstream link (sessions are numbered from 1).
    static let upstreamLink = UInt64.max

    /// Makes a local node's upstream link one of the gossip's links (records go up and come down).
    func carry(_ upstream: UpstreamReplicator, link: UInt64 = upstreamLink) {
        let type = PacketLinkURL.linkType(of: upstream.configuration.url)
        upstream.attachPresence(UpstreamPresence(
            linkUp: { [weak self] key, send in self?.linkUp(link, peerKey: key, type: type, send: send) },
            received: { [weak self] records in self?.received(records, from: link) },
            linkDown: { [weak self] in self?.linkDown(link) }))
    }

    /// The same for a link this node dials to another node found on the LAN (`LANMesh`), under
    /// an id of its own.
    func carryLANLink(_ replicator: UpstreamReplicator) {
        carry(replicator, link: lanLinkIDs.subtract(1, ordering: .relaxed).newValue)
    }

    /// Runs the gossip's timers and sends what is due.
    func flush() {
        let now = clock()
        let sends = state.withLock { s -> [(SyncConnection?, (@Sendable ([PresenceRecord]) -> Void)?, [PresenceRecord])] in
            guard now >= s.gossip.nextDeadline else { return [] }
            return s.gossip.tick(now: now).map { (s.sessions[$0.link], s.senders[$0.link], $0.records) }
        }
        for (connection, sender, records) in sends {
            if let connection { connection.sendPresence(records) } else { sender?(records) }
        }
    }

    /// Runs `body` on the gossip under the lock, then sends what became due.
    func withGossip<R>(_ body: (inout PresenceGossip, UInt64) -> R) -> R {
        let now = clock()
        let r = state.withLock { body(&$0.gossip, now) }
        flush()
        return r
    }

    var graph: PresenceGraph {
        let now = clock()
        return state.withLock { $0.gossip.graph(now: now) }
    }

    var statistics: PresenceGossip.Statistics { state.withLock { $0.gossip.statistics } }
}
