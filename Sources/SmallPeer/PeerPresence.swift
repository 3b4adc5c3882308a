// A small peer's presence (PROTOCOL.md §4.14, docs/SMALLPEER.md "Presence"): its own record
// and the graph it learns from its sync links. Each `SyncClient` is one link of the peer's
// `PresenceGossip`; the gossip lives here, under its own mutex (never taken with the store's).
//
// Observers get the graph at once and again whenever it changes, on the thread that changed it
// (a sync client's loop, or the caller of `setPresenceMetadata`), outside the lock.

import CRDT
import Glibc
import SyncProtocol
import Synchronization
import Values

final class PeerPresence: Sendable {
    private struct State {
        var gossip: PresenceGossip
        var sends: [UInt64: @Sendable ([PresenceRecord]) -> Void] = [:]
        /// Links of peers this one serves (not links to a BigPeer).
        var served: Set<UInt64> = []
        var observers: [UInt64: @Sendable (PresenceGraph) -> Void] = [:]
        var nextObserver: UInt64 = 0
        /// The graph observers were last given, and the gossip's revision it was computed at.
        var delivered: PresenceGraph?
        var deliveredRevision: UInt64?
    }
    private let state: Mutex<State>
    private static let links = Atomic<UInt64>(0)

    init(peerKey: [UInt8], deviceName: String) {
        state = Mutex(State(gossip: Self.gossip(peerKey: peerKey, local: PresenceGossip.LocalInfo(deviceName: deviceName))))
    }

    static func gossip(peerKey: [UInt8], local: PresenceGossip.LocalInfo) -> PresenceGossip {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let epoch = UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
        return PresenceGossip(peerKey: peerKey, epoch: epoch, local: local, now: now())
    }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1000 + UInt64(ts.tv_nsec) / 1_000_000
    }

    /// A number for a new link of this process.
    static func nextLinkID() -> UInt64 { links.add(1, ordering: .relaxed).newValue }

    /// The key and name a sync client announces in `hello`: the record carries the same. A new
    /// key (a client configured with another one) starts a new record while no link is up.
    func identify(peerKey: [UInt8], deviceName: String) {
        update { s in
            var local = s.gossip.localInfo
            if s.gossip.peerKey != peerKey, s.sends.isEmpty {
                local.deviceName = deviceName
                s.gossip = Self.gossip(peerKey: peerKey, local: local)
            } else if local.deviceName != deviceName {
                local.deviceName = deviceName
                try? s.gossip.setLocal(local, now: Self.now())  // metadata unchanged: within its bound
            }
        }
    }

    /// `served`: a peer this one serves (`SmallPeer.serve`), which says nothing of a BigPeer link.
    func linkUp(_ id: UInt64, peerKey: [UInt8], type: LinkType, peer: DirectPeer? = nil, served: Bool = false,
                send: @escaping @Sendable ([PresenceRecord]) -> Void) {
        update { s in
            s.sends[id] = send
            if served { s.served.insert(id) }
            var local = s.gossip.localInfo
            if !served, !local.isConnectedToBigPeer {
                local.isConnectedToBigPeer = true
                try? s.gossip.setLocal(local, now: Self.now())
            }
            s.gossip.linkUp(id, peerKey: peerKey, type: type, peer: peer, now: Self.now())
        }
    }

    func linkDown(_ id: UInt64) {
        update { s in
            guard s.sends.removeValue(forKey: id) != nil else { return }
            s.gossip.linkDown(id, now: Self.now())
            var local = s.gossip.localInfo
            s.served.remove(id)
            if s.sends.count == s.served.count, local.isConnectedToBigPeer {
                local.isConnectedToBigPeer = false
                try? s.gossip.setLocal(local, now: Self.now())
            }
        }
    }

    func received(_ records: [PresenceRecord], from id: UInt64) {
        update { $0.gossip.receive(records, from: id, now: Self.now()) }
    }

    /// Runs the gossip's timers (a sync client's tick).
    func tick() { update { _ in } }

    func setMetadata(_ metadata: [String: Value]) throws(PresenceGossip.Failure) {
        var failure: PresenceGossip.Failure?
        update { s in
            var local = s.gossip.localInfo
            local.metadata = metadata
            do throws(PresenceGossip.Failure) { try s.gossip.setLocal(local, now: Self.now()) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    var graph: PresenceGraph { state.withLock { $0.gossip.graph(now: Self.now()) } }

    func observe(_ handler: @escaping @Sendable (PresenceGraph) -> Void) -> UInt64 {
        let (id, graph) = state.withLock { s -> (UInt64, PresenceGraph) in
            s.nextObserver += 1
            s.observers[s.nextObserver] = handler
            // Observers already registered have seen every change up to now: this is their graph too.
            let graph = s.gossip.graph(now: Self.now())
            s.delivered = graph
            s.deliveredRevision = s.gossip.revision
            return (s.nextObserver, graph)
        }
        handler(graph)
        return id
    }

    func stopObserving(_ id: UInt64) { state.withLock { _ = $0.observers.removeValue(forKey: id) } }

    /// The peer was closed: no more deliveries.
    func removeObservers() { state.withLock { $0.observers = [:] } }

    /// Applies `change`, then sends what the gossip has due and tells observers of a changed graph,
    /// both after the lock is released.
    private func update(_ change: (inout State) -> Void) {
        let now = Self.now()
        let (sends, observers, graph) = state.withLock { s -> ([(@Sendable ([PresenceRecord]) -> Void, [PresenceRecord])], [@Sendable (PresenceGraph) -> Void], PresenceGraph?) in
            change(&s)
            let due = now >= s.gossip.nextDeadline ? s.gossip.tick(now: now) : []
            let sends = due.compactMap { m in s.sends[m.link].map { ($0, m.records) } }
            guard !s.observers.isEmpty, s.deliveredRevision != s.gossip.revision else { return (sends, [], nil) }
            s.deliveredRevision = s.gossip.revision
            let graph = s.gossip.graph(now: now)
            guard graph != s.delivered else { return (sends, [], nil) }
            s.delivered = graph
            return (sends, Array(s.observers.values), graph)
        }
        for (send, records) in sends { send(records) }
        if let graph { for o in observers { o(graph) } }
    }
}

extension SmallPeer {
    /// The presence graph this peer knows: itself and every peer reachable through its sync links,
    /// however many hops away (Ditto's `presence.graph`).
    public var presenceGraph: PresenceGraph { presence.graph }

    /// The device name this peer shows in presence, also to the peers it only serves (a sync
    /// client announces its configured `deviceName` in `hello` and sets it too).
    public func setDeviceName(_ name: String) {
        presence.identify(peerKey: SyncClientCore.peerKey(siteID.rawValue), deviceName: name)
    }

    /// Replaces the metadata this peer publishes in presence (`peerMetadata`); re-published to
    /// every link. At most 4 KiB encoded (`PresenceGossip.Failure.metadataTooLarge` otherwise).
    public func setPresenceMetadata(_ metadata: [String: Value]) throws(PresenceGossip.Failure) {
        try presence.setMetadata(metadata)
    }

    /// Calls `handler` with the graph now and whenever it changes, until the handle is cancelled.
    public func observePresence(_ handler: @escaping @Sendable (PresenceGraph) -> Void) -> CancelHandle {
        let id = presence.observe(handler)
        return CancelHandle { [weak self] in self?.presence.stopObserving(id) }
    }

    func presenceReceived(_ records: [PresenceRecord], link: UInt64) { presence.received(records, from: link) }
}
