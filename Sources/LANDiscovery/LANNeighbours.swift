import Discovery

/// The partners a BigPeer (a local node, or a small peer with `--listen`) has found on the LAN,
/// and which links it should hold to them (docs/LOCAL-NODE.md, "Two nodes on one ship"). A value
/// with no I/O and no clock: fed browser events with `now` (milliseconds, any monotonic clock),
/// it answers with what to dial and what to hang up; the caller owns the links.
///
/// - One entry per peer key, however many advertisements carry it (several instances of one node
///   on one database advertise the same key under `NAME`, `NAME (2)`, …): one link per pair.
/// - `LANLinkRule` decides who dials; partners that dial us are listed too (`dials == false`).
/// - A partner whose every advertisement has gone (a goodbye, TTL expiry, another group in its
///   TXT) is kept for `grace` before its link is hung up, so a node that restarts or loses
///   multicast for a moment keeps its link; it is dialled again when it is seen again.
/// - An address change replaces the link at once (the old address may no longer answer).
public struct LANNeighbours: Sendable {
    public struct Neighbour: Sendable, Equatable {
        /// The partner's peer key as advertised (lowercase hex).
        public var peerKey: String
        /// Its device name (the advertisement's instance name).
        public var name: String
        /// Where to dial it: `tcp://ADDRESS:PORT`.
        public var url: String
        /// Whether this side dials it (else it dials this side).
        public var dials: Bool
        /// When its last advertisement went; nil while it is advertised.
        public var vanishedAt: Int64?
        /// Its advertisements now: instance name → URL.
        var advertisements: [String: String]
    }

    public enum Action: Equatable, Sendable {
        /// Start a link to this partner.
        case dial(Neighbour)
        /// Its address changed: end the link and start one to the new URL.
        case redial(Neighbour)
        /// It is gone (past the grace): end the link.
        case hangUp(peerKey: String)
    }

    public let rule: LANLinkRule
    /// How long a partner that stopped advertising keeps its link, in milliseconds.
    public var grace: Int64
    public private(set) var neighbours: [String: Neighbour] = [:]
    /// Which peer key each instance name advertised last.
    private var keyByName: [String: String] = [:]

    public init(rule: LANLinkRule, grace: Duration) {
        self.rule = rule
        self.grace = Int64(grace / .milliseconds(1))
    }

    /// A browser event (what `MDNSDaemon.browse` hands over).
    public mutating func receive(_ event: MDNSBrowserEvent, now: Int64) -> [Action] {
        switch event {
        case .found(let service), .updated(let service):
            guard let ad = LANAdvertisement(service), let url = LANNodeFinder.url(service) else {
                return lost(name: service.instanceName, now: now)
            }
            return seen(ad, url: url, now: now)
        case .lost(let name):
            return lost(name: name.firstLabel, now: now)
        }
    }

    /// An advertisement found or changed, and the URL it is reached at.
    public mutating func seen(_ ad: LANAdvertisement, url: String, now: Int64) -> [Action] {
        let decision = rule.decide(ad)
        guard decision != .ignore else { return lost(name: ad.name, now: now) }
        let key = LANAdvertisement.hex(ad.peerKey)
        var actions: [Action] = []
        if let previous = keyByName[ad.name], previous != key { actions += withdraw(ad.name, from: previous, now: now) }
        keyByName[ad.name] = key
        guard var neighbour = neighbours[key] else {
            let new = Neighbour(peerKey: key, name: ad.name, url: url, dials: decision == .dial, vanishedAt: nil, advertisements: [ad.name: url])
            neighbours[key] = new
            return actions + (new.dials ? [.dial(new)] : [])
        }
        neighbour.advertisements[ad.name] = url
        neighbour.vanishedAt = nil
        let oldURL = neighbour.url
        Self.choose(&neighbour)
        neighbours[key] = neighbour
        if neighbour.dials && neighbour.url != oldURL { actions.append(.redial(neighbour)) }
        return actions
    }

    /// An advertisement gone (goodbye, expiry, or no longer one of ours).
    public mutating func lost(name: String, now: Int64) -> [Action] {
        guard let key = keyByName.removeValue(forKey: name) else { return [] }
        return withdraw(name, from: key, now: now)
    }

    /// Hangs up partners gone for longer than the grace.
    public mutating func tick(now: Int64) -> [Action] {
        var actions: [Action] = []
        for (key, neighbour) in neighbours.sorted(by: { $0.key < $1.key }) {
            guard let since = neighbour.vanishedAt, now - since >= grace else { continue }
            neighbours[key] = nil
            if neighbour.dials { actions.append(.hangUp(peerKey: key)) }
        }
        return actions
    }

    /// When `tick` has something to do next (nil: nothing is waiting for its grace to end).
    public var nextWakeup: Int64? {
        neighbours.values.compactMap { $0.vanishedAt.map { $0 + grace } }.min()
    }

    private mutating func withdraw(_ name: String, from key: String, now: Int64) -> [Action] {
        guard var neighbour = neighbours[key], neighbour.advertisements.removeValue(forKey: name) != nil else { return [] }
        if neighbour.advertisements.isEmpty {
            neighbour.vanishedAt = now
            neighbours[key] = neighbour
            return []
        }
        let oldURL = neighbour.url
        Self.choose(&neighbour)
        neighbours[key] = neighbour
        return neighbour.dials && neighbour.url != oldURL ? [.redial(neighbour)] : []
    }

    /// The advertisement a partner is named and dialled by: the first instance name, so every
    /// browser picks the same one whatever order they arrived in.
    private static func choose(_ neighbour: inout Neighbour) {
        guard let first = neighbour.advertisements.keys.min(), let url = neighbour.advertisements[first] else { return }
        neighbour.name = first
        neighbour.url = url
    }
}
