// Presence gossip of one peer over its links (PROTOCOL.md §4.14), as a sans-I/O state machine on
// an injected clock. The driver (a server's PresenceHub, a SmallPeer's sync client) tells it links
// coming and going and records received, calls `tick` at `nextDeadline`, and sends what `tick`
// returns as `presence` messages.
//
//   origin O publishes (O, epoch, seq) ──link──► X: newer than what X holds? ─no─► dropped (dedup)
//                                                   │ yes: kept until its ttl runs out
//                                                   ▼
//                          forwarded (hops + 1 ≤ maxHops) on every link of X except the one it came by
//
// A record is forwarded only when it is new to the forwarder, so each version crosses each link at
// most once in each direction, whatever the topology (cycles included): no loop, no amplification.
// What one peer can make others do is bounded: received records are rate-limited per link (a token
// bucket; the excess is dropped, the next refresh repairs it), the table holds at most `maxRecords`
// origins, and updates of one origin that arrive faster than `flushMillis` are coalesced: only the
// newest version goes on. Memory per link is O(1): a link remembers how far into the change list
// (`changes`, bounded by compaction) it has been sent.

import Values

public struct PresenceGossip: Sendable {
    public struct Configuration: Sendable {
        /// Origins kept (besides the local peer); records of new origins beyond it are dropped.
        public var maxRecords = 1024
        /// Links a record may travel; a record that arrived `maxHops` links from its origin is not forwarded.
        public var maxHops: UInt64 = 8
        /// Validity of the local record (`ttl`); others keep it that long after receiving it.
        public var recordTTLMillis: UInt64 = 60_000
        /// A received `ttl` above this is cut to it.
        public var maxTTLMillis: UInt64 = 300_000
        /// The local record is published again (seq + 1) this often, so it never expires while up.
        public var refreshMillis: UInt64 = 20_000
        /// Sends are batched: at most one `presence` round per this interval.
        public var flushMillis: UInt64 = 500
        /// Records accepted per link: this many per second, in bursts of up to `receiveBurst`.
        public var receiveRecordsPerSecond: UInt64 = 100
        public var receiveBurst: UInt64 = 1100
        /// Bounds of an outgoing message: records and encoded bytes (below the 64 KiB every peer
        /// must accept, PROTOCOL.md §8; a record larger than that alone is not forwarded).
        public var maxRecordsPerMessage = 64
        public var maxMessageBytes = 60 << 10
        /// Encoded size of `meta` (and of `idmeta`) of the local record.
        public var maxMetadataBytes = 4 << 10
        /// Links the local record lists, at most (and at most `maxLinkBytes` of them encoded), so
        /// that it fits the smallest message a peer must accept (64 KiB) with its metadata. A
        /// server with more peers lists the first by key; the others are in its own graph only.
        public var maxLinksPerRecord = 256
        public var maxLinkBytes = 24 << 10
        /// A peer with more links than this (a server) publishes changes of its link list at most
        /// every `linkChangeMillis`: each change re-sends its record (up to `maxLinkBytes`) on every
        /// link, so a thousand peers connecting at once would otherwise cost a thousand sends of a
        /// thousand records. With this many links or fewer, link changes go with the next flush.
        public var promptLinkChanges = 16
        public var linkChangeMillis: UInt64 = 5_000

        public init() {}
    }

    /// A link as the gossip sees it; `peer` is what the link's handshake said about the other end
    /// (shown for a peer that publishes no record of its own, e.g. a client without presence).
    struct Link: Sendable {
        var peerKey: [UInt8]
        var type: LinkType
        var peer: DirectPeer?
        /// A link to another instance of the same server (through their shared database): not a
        /// connection of the graph, not rate-limited (PresenceGossip+Siblings.swift).
        var isSibling = false
        /// Changes up to this number have been sent (or skipped) on this link.
        var sentThrough: UInt64 = 0
        var tokens: UInt64
        var refilledAt: UInt64
    }

    struct Stored: Sendable {
        var record: PresenceRecord
        var expiresAt: UInt64
        var via: UInt64
        var change: UInt64
    }

    public let configuration: Configuration
    public private(set) var own: PresenceRecord
    var links: [UInt64: Link] = [:]
    /// Peer keys of the direct links, with how many links each has (a receive checks it per record).
    var directKeys: [[UInt8]: Int] = [:]
    /// No record expires before this (a lower bound, made exact again by `tick`).
    var soonestExpiry = UInt64.max
    /// The links of the other instances of this server (their peers are this server's too).
    var siblingLinks: [PresenceLink] = []
    var records: [[UInt8]: Stored] = [:]
    /// Record changes in order: (change number, origin); entries whose number is not the origin's
    /// current one are superseded and skipped, and dropped by compaction.
    var changes: [(number: UInt64, key: [UInt8])] = []
    var changeCounter: UInt64 = 0
    var ownChange: UInt64 = 0
    var lastFlushAt: UInt64?
    var flushDue: UInt64?
    /// Links that came up since the last flush: they get every record at once, at the next tick,
    /// without waiting for the batched flush of the others.
    var newLinks: Set<UInt64> = []
    /// When a deferred change of the local link list is published (`promptLinkChanges`).
    var ownLinksDue: UInt64?
    var lastOwnChangeAt: UInt64 = 0
    var nextRefreshAt: UInt64
    /// Grows whenever the graph may have changed (a record, a link, the local record, an expiry):
    /// a driver that shows the graph recomputes it only then.
    public private(set) var revision: UInt64 = 0
    /// Counters (tests, metrics).
    public private(set) var statistics = Statistics()

    public struct Statistics: Sendable, Equatable {
        public var accepted = 0
        public var duplicates = 0
        public var droppedRate = 0
        public var droppedFull = 0
        public var recordsSent = 0
        public var messagesSent = 0
    }

    /// `epoch` must grow at every start of this peer (its start time in ms since 1970 will do).
    public init(configuration: Configuration = .init(), peerKey: [UInt8], epoch: UInt64, local: LocalInfo, now: UInt64) {
        self.configuration = configuration
        own = PresenceRecord(peerKey: peerKey, epoch: epoch, seq: 1, ttlMillis: configuration.recordTTLMillis, deviceName: local.deviceName,
                             os: local.os, sdkVersion: local.sdkVersion, isConnectedToBigPeer: local.isConnectedToBigPeer,
                             metadata: local.metadata, identityMetadata: local.identityMetadata)
        nextRefreshAt = now + configuration.refreshMillis
        ownChanged(now: now)
    }

    public var peerKey: [UInt8] { own.peerKey }

    /// What the local record says now.
    public var localInfo: LocalInfo {
        LocalInfo(deviceName: own.deviceName, os: own.os, sdkVersion: own.sdkVersion, isConnectedToBigPeer: own.isConnectedToBigPeer,
                  metadata: own.metadata, identityMetadata: own.identityMetadata)
    }

    // MARK: - Inputs

    /// Replaces what the local peer publishes about itself (re-published with the next flush).
    public mutating func setLocal(_ info: LocalInfo, now: UInt64) throws(Failure) {
        for m in [info.metadata, info.identityMetadata] {
            let size = CBORValueCodec.encode(.object(m)).count
            guard size <= configuration.maxMetadataBytes else { throw .metadataTooLarge(bytes: size, limit: configuration.maxMetadataBytes) }
        }
        own.deviceName = info.deviceName
        own.os = info.os
        own.sdkVersion = info.sdkVersion
        own.isConnectedToBigPeer = info.isConnectedToBigPeer
        own.metadata = info.metadata
        own.identityMetadata = info.identityMetadata
        ownChanged(now: now)
    }

    /// A link is up (after its handshake): it gets every record held, the local record lists it.
    public mutating func linkUp(_ id: UInt64, peerKey: [UInt8], type: LinkType, peer: DirectPeer? = nil, now: UInt64) {
        if let old = links[id], !old.isSibling { forgetDirect(old.peerKey) }
        links[id] = Link(peerKey: peerKey, type: type, peer: peer, tokens: configuration.receiveBurst, refilledAt: now)
        directKeys[peerKey, default: 0] += 1
        linkListChanged(now: now)
        newLinks.insert(id)  // a new link gets everything at once (the batching is for updates)
    }

    /// A link is gone. Records learned through it stay until they expire (the graph shows only
    /// what is still reachable).
    public mutating func linkDown(_ id: UInt64, now: UInt64) {
        guard let old = links.removeValue(forKey: id) else { return }
        newLinks.remove(id)
        if !old.isSibling { forgetDirect(old.peerKey) }
        linkListChanged(now: now)
    }

    /// What the login of link `id`'s peer says about it (`identityServiceMetadata`, checked by
    /// this side): from now on the peer's records carry it as `idmeta`, whatever the peer's own
    /// say, in the graph and wherever they are forwarded. nil: the peer's own `idmeta` stands.
    public mutating func identify(_ id: UInt64, metadata: [String: Value]?, now: UInt64) {
        guard var link = links[id], !link.isSibling else { return }
        var peer = link.peer ?? DirectPeer(deviceName: "")
        guard peer.identityMetadata != metadata else { return }
        peer.identityMetadata = metadata
        link.peer = peer
        links[id] = link
        revision += 1
        guard let metadata, var stored = records[link.peerKey], stored.via == id, stored.record.identityMetadata != metadata else { return }
        stored.record.identityMetadata = metadata
        changeCounter += 1
        stored.change = changeCounter
        records[link.peerKey] = stored
        appendChange(link.peerKey, now: now)
    }

    /// Records received on link `id`.
    public mutating func receive(_ incoming: [PresenceRecord], from id: UInt64, now: UInt64) {
        guard var link = links[id] else { return }
        refill(&link, now: now)
        for r in incoming {
            if !link.isSibling {
                guard link.tokens > 0 else { statistics.droppedRate += 1; continue }
                link.tokens -= 1
            }
            accept(r, from: id, link: link, now: now)
        }
        links[id] = link
    }

    mutating func accept(_ r: PresenceRecord, from id: UInt64, link: Link, now: UInt64) {
        guard r.peerKey != own.peerKey else { statistics.duplicates += 1; return }
        let fromOrigin = link.peerKey == r.peerKey
        var r = r
        if fromOrigin, let verified = link.peer?.identityMetadata { r.identityMetadata = verified }
        // A directly linked origin speaks for itself: copies by others are not taken over its own.
        if !fromOrigin, directKeys[r.peerKey] != nil { statistics.duplicates += 1; return }
        if let existing = records[r.peerKey] {
            // From the origin itself any other version wins: a restarted origin whose clock went
            // back (a smaller epoch) is believed at once rather than after the old record expires.
            let wins = fromOrigin ? (r.epoch, r.seq) != (existing.record.epoch, existing.record.seq) : r.isNewer(than: existing.record)
            guard wins else {
                statistics.duplicates += 1
                // The same version again (a sibling's heartbeat): still valid that much longer.
                if (r.epoch, r.seq) == (existing.record.epoch, existing.record.seq) {
                    records[r.peerKey]?.expiresAt = max(existing.expiresAt, now + min(r.ttlMillis, configuration.maxTTLMillis))
                }
                return
            }
        } else if records.count >= configuration.maxRecords {
            statistics.droppedFull += 1
            return
        }
        statistics.accepted += 1
        changeCounter += 1
        let expiresAt = now + min(r.ttlMillis, configuration.maxTTLMillis)
        records[r.peerKey] = Stored(record: r, expiresAt: expiresAt, via: id, change: changeCounter)
        soonestExpiry = min(soonestExpiry, expiresAt)
        appendChange(r.peerKey, now: now)
    }

    // MARK: - Time

    /// When `tick` has something to do at the latest.
    public var nextDeadline: UInt64 {
        if !newLinks.isEmpty { return 0 }
        var next = nextRefreshAt
        if let flushDue { next = min(next, flushDue) }
        if let ownLinksDue { next = min(next, ownLinksDue) }
        return min(next, soonestExpiry)
    }

    /// Expires records, refreshes the local one, and returns the messages to send: per link, the
    /// records it has not had yet.
    public mutating func tick(now: UInt64) -> [(link: UInt64, records: [PresenceRecord])] {
        if now >= soonestExpiry {
            records = records.filter { $0.value.expiresAt > now }
            revision += 1
            soonestExpiry = records.values.lazy.map(\.expiresAt).min() ?? .max
        }
        if now >= nextRefreshAt {
            nextRefreshAt = now + configuration.refreshMillis
            ownChanged(now: now)
        } else if let due = ownLinksDue, now >= due {
            ownChanged(now: now)
        }
        let batched = flushDue.map { now >= $0 } ?? false
        guard batched || !newLinks.isEmpty else { return [] }
        // The batched flush goes to every link; between two, only new links are served.
        let targets = batched ? links.keys.sorted() : newLinks.sorted()
        newLinks = []
        if batched {
            flushDue = nil
            lastFlushAt = now
        }
        compact()
        // The local record with its links, built and encoded once for all links (it lists up to
        // 256 of them); every session sends these same bytes.
        let ownOutgoing = ownOutgoingRecord().encodedOnce()
        var out: [(link: UInt64, records: [PresenceRecord])] = []
        for id in targets {
            guard var link = links[id], !link.isSibling else { continue }
            var batch: [PresenceRecord] = []
            var bytes = 0
            let start = firstChange(after: link.sentThrough)
            for (number, key) in changes[start...] {
                link.sentThrough = number
                guard let r = key == own.peerKey ? (number == ownChange ? ownOutgoing : nil)
                    : outgoing(key, number: number, to: id, link: link, now: now) else { continue }
                let size = r.encodedSize
                if size + 16 > configuration.maxMessageBytes { continue }  // the message's own head and keys
                if !batch.isEmpty, batch.count >= configuration.maxRecordsPerMessage || bytes + size > configuration.maxMessageBytes {
                    out.append((id, batch))
                    batch = []
                    bytes = 0
                }
                batch.append(r)
                bytes += size
            }
            if !batch.isEmpty { out.append((id, batch)) }
            links[id] = link
        }
        for m in out {
            statistics.messagesSent += 1
            statistics.recordsSent += m.records.count
        }
        return out
    }

    /// The local record as it is sent: with this peer's links (and its sibling instances').
    func ownOutgoingRecord() -> PresenceRecord {
        var r = own
        r.links = Self.capped(Self.sorted(Set(ownLinks + siblingLinks)), configuration)
        return r
    }

    /// The record to send for change `number` of another origin's `key` on link `to`, or nil:
    /// superseded, expired, learned through that link, about the link's own peer, or at the hop limit.
    func outgoing(_ key: [UInt8], number: UInt64, to id: UInt64, link: Link, now: UInt64) -> PresenceRecord? {
        guard let s = records[key], s.change == number, s.via != id, key != link.peerKey, s.expiresAt > now,
              s.record.hops + 1 < configuration.maxHops else { return nil }
        var r = s.record
        r.hops += 1
        r.ttlMillis = s.expiresAt - now
        return r
    }

    /// The first of `links` within the record's bounds.
    static func capped(_ links: [PresenceLink], _ c: Configuration) -> [PresenceLink] {
        var bytes = 0
        var out: [PresenceLink] = []
        for l in links.prefix(c.maxLinksPerRecord) {
            bytes += l.peerKey.count + 20  // map head, "pk", "type" and the type's text, at most
            if bytes > c.maxLinkBytes { break }
            out.append(l)
        }
        return out
    }

    static func sorted(_ links: Set<PresenceLink>) -> [PresenceLink] {
        links.sorted { $0.peerKey == $1.peerKey ? $0.type.rawValue < $1.type.rawValue : $0.peerKey.lexicographicallyPrecedes($1.peerKey) }
    }

    /// This peer's own links (not those of sibling instances).
    var ownLinks: [PresenceLink] { links.values.filter { !$0.isSibling }.map { PresenceLink(peerKey: $0.peerKey, type: $0.type) } }

    // MARK: - Bookkeeping

    mutating func forgetDirect(_ key: [UInt8]) {
        let n = (directKeys[key] ?? 1) - 1
        directKeys[key] = n > 0 ? n : nil
    }

    /// A link came or went: the local record lists it with the next flush, or, for a peer with many
    /// links, within `linkChangeMillis` of the previous change of the local record.
    mutating func linkListChanged(now: UInt64) {
        revision += 1
        guard links.count > configuration.promptLinkChanges else { return ownChanged(now: now) }
        if ownLinksDue == nil { ownLinksDue = max(now, lastOwnChangeAt + configuration.linkChangeMillis) }
    }

    mutating func ownChanged(now: UInt64) {
        ownLinksDue = nil
        lastOwnChangeAt = now
        own.seq += 1
        changeCounter += 1
        ownChange = changeCounter
        appendChange(own.peerKey, now: now)
    }

    mutating func appendChange(_ key: [UInt8], now: UInt64) {
        revision += 1
        changes.append((changeCounter, key))
        if flushDue == nil { flushDue = max(now, (lastFlushAt ?? 0) + configuration.flushMillis) }
        if changes.count > 2 * (records.count + 1) + 64 { compact() }
    }

    /// Drops superseded and expired entries: the list stays within about twice the records held.
    mutating func compact() {
        changes.removeAll { entry in
            entry.key == own.peerKey ? entry.number != ownChange : records[entry.key]?.change != entry.number
        }
    }

    /// Index of the first change numbered above `n` (binary search: numbers ascend).
    func firstChange(after n: UInt64) -> Int {
        var lo = 0, hi = changes.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if changes[mid].number <= n { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    mutating func refill(_ link: inout Link, now: UInt64) {
        guard now > link.refilledAt else { return }
        let earned = (now - link.refilledAt) * configuration.receiveRecordsPerSecond / 1000
        guard earned > 0 else { return }
        link.tokens = min(configuration.receiveBurst, link.tokens + earned)
        link.refilledAt = now
    }
}
