// Several instances of one server (one database, one peer key) share their peers: each tells the
// others, through the database, its own links and its direct peers' records; each shows the
// union (docs/LOCAL-NODE.md, "Presence"). The gossip sees the database as one more link, a
// sibling link: its records are taken like any others (and forwarded to the real links), the
// siblings' links are added to the local record's, and nothing is sent on it by `tick`.

extension PresenceGossip {
    /// The link through which the siblings' records arrive (`receive(_:from:)` with this id).
    public mutating func siblingLinkUp(_ id: UInt64, now: UInt64) {
        links[id] = Link(peerKey: own.peerKey, type: .webSocket, isSibling: true, tokens: 0, refilledAt: now)
    }

    /// Replaces the links of the sibling instances (a new local version when they changed).
    public mutating func setSiblingLinks(_ new: [PresenceLink], now: UInt64) {
        let links = Self.sorted(Set(new.filter { $0.peerKey != own.peerKey }))
        guard links != siblingLinks else { return }
        siblingLinks = links
        ownChanged(now: now)
    }

    /// What this instance tells its siblings: its own record with only its own links, and per
    /// direct link the peer's own record, or for a peer that publishes none one made from its
    /// handshake (version 0.0), each valid `ttlMillis`.
    public func siblingSnapshot(now: UInt64, ttlMillis: UInt64) -> [PresenceRecord] {
        var mine = own
        mine.links = Self.sorted(Set(ownLinks))
        mine.ttlMillis = ttlMillis
        var out = [mine]
        var seen: Set<[UInt8]> = [own.peerKey]
        for (id, link) in links.sorted(by: { $0.key < $1.key }) where !link.isSibling && seen.insert(link.peerKey).inserted {
            if let s = records[link.peerKey], s.via == id, s.expiresAt > now {
                var r = s.record
                r.ttlMillis = ttlMillis
                out.append(r)
            } else {
                out.append(PresenceRecord(peerKey: link.peerKey, epoch: 0, seq: 0, ttlMillis: ttlMillis, deviceName: link.peer?.deviceName ?? "",
                                          metadata: link.peer?.metadata ?? [:], links: [PresenceLink(peerKey: own.peerKey, type: link.type)]))
            }
        }
        return out
    }
}
