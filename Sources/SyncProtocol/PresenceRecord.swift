// Presence records (PROTOCOL.md §4.14): what a peer publishes about itself and its links, and
// their CBOR form inside a `presence` message. The gossip that forwards them: PresenceGossip.swift.
//
//   record = { ep, os, pk, sdk, seq, ttl, hops, meta, name, cloud, links, idmeta }   (canonical key order)

import Values

/// One link of the record's origin: the peer at the other end and the transport.
public struct PresenceLink: Sendable, Hashable {
    public var peerKey: [UInt8]
    public var type: LinkType

    public init(peerKey: [UInt8], type: LinkType) {
        self.peerKey = peerKey
        self.type = type
    }
}

/// A versioned description of one peer, published by that peer (its origin) and forwarded by others.
/// A newer version has a greater `(epoch, seq)`; the epoch grows at every start of the origin.
public struct PresenceRecord: Sendable, Equatable {
    public var peerKey: [UInt8]
    public var epoch: UInt64
    public var seq: UInt64
    /// Links travelled from the origin (0 when the origin sends it).
    public var hops: UInt64
    /// How long (ms) the record stays valid from when it is received.
    public var ttlMillis: UInt64
    public var deviceName: String
    public var os: String
    public var sdkVersion: String
    /// Whether the origin has a link to a BigPeer server (Ditto: `isConnectedToDittoCloud`).
    public var isConnectedToBigPeer: Bool
    public var metadata: [String: Value]
    public var identityMetadata: [String: Value]
    public var links: [PresenceLink]
    /// The record's encoding, when it is sent unchanged on many links: a server's own record
    /// lists up to 256 links (~24 KB), and `PresenceGossip.tick` encodes it once per flush
    /// instead of once per link for its size and again per session to send it.
    public var encoding = Encoding()

    /// Kept encoded bytes. Not part of the record's value: a record equals its copy whether or
    /// not either carries them (so `==` is always true here). Whoever sets them must not change
    /// the record afterwards (`PresenceGossip.ownOutgoingRecord` builds and encodes it last).
    public struct Encoding: Sendable, Equatable {
        var bytes: [UInt8]?
        public init() {}
        public static func == (_: Encoding, _: Encoding) -> Bool { true }
    }

    /// The same record carrying its encoding.
    public func encodedOnce() -> PresenceRecord {
        var r = self
        r.encoding = Encoding()
        var w = CBORWriter(capacity: 256)
        w.write(r)
        r.encoding.bytes = w.bytes
        return r
    }

    public init(peerKey: [UInt8], epoch: UInt64, seq: UInt64, hops: UInt64 = 0, ttlMillis: UInt64, deviceName: String,
                os: String = "", sdkVersion: String = "", isConnectedToBigPeer: Bool = false, metadata: [String: Value] = [:],
                identityMetadata: [String: Value] = [:], links: [PresenceLink] = []) {
        self.peerKey = peerKey
        self.epoch = epoch
        self.seq = seq
        self.hops = hops
        self.ttlMillis = ttlMillis
        self.deviceName = deviceName
        self.os = os
        self.sdkVersion = sdkVersion
        self.isConnectedToBigPeer = isConnectedToBigPeer
        self.metadata = metadata
        self.identityMetadata = identityMetadata
        self.links = links
    }

    /// Whether this version is newer than `other`'s (same origin).
    public func isNewer(than other: PresenceRecord) -> Bool { (epoch, seq) > (other.epoch, other.seq) }

    /// Its encoded size inside a `presence` message (for packing messages to a size).
    public var encodedSize: Int {
        if let bytes = encoding.bytes { return bytes.count }
        var w = CBORWriter(capacity: 256)
        w.write(self)
        return w.bytes.count
    }
}

extension CBORWriter {
    /// `record`, keys in canonical order: ep, os, pk, sdk, seq, ttl, hops, meta, name, cloud, links, idmeta.
    mutating func write(_ r: PresenceRecord) {
        if let bytes = r.encoding.bytes { return raw(bytes) }
        mapHeader(12)
        text("ep"); unsigned(r.epoch)
        text("os"); text(r.os)
        text("pk"); byteString(r.peerKey)
        text("sdk"); text(r.sdkVersion)
        text("seq"); unsigned(r.seq)
        text("ttl"); unsigned(r.ttlMillis)
        text("hops"); unsigned(r.hops)
        text("meta"); value(.object(r.metadata))
        text("name"); text(r.deviceName)
        text("cloud"); bool(r.isConnectedToBigPeer)
        text("links")
        arrayHeader(r.links.count)
        for l in r.links {
            mapHeader(2)
            text("pk"); byteString(l.peerKey)
            text("type"); text(l.type.rawValue)
        }
        text("idmeta"); value(.object(r.identityMetadata))
    }

    /// `presence`: { t, recs }.
    mutating func write(presence records: [PresenceRecord]) {
        mapHeader(2)
        text("t"); text("presence")
        text("recs")
        arrayHeader(records.count)
        for r in records { write(r) }
    }
}

extension Fields {
    /// `presence.recs`: 1...maxPresenceRecords records, each within the presence limits (§8).
    func presenceRecords() throws(E) -> [PresenceRecord] {
        let list = try array("recs", minCount: 1)
        guard list.count <= limits.maxPresenceRecords else {
            throw .outOfRange(type: type, field: "recs", reason: "at most \(limits.maxPresenceRecords) records")
        }
        var out: [PresenceRecord] = []
        out.reserveCapacity(list.count)
        for item in list { out.append(try presenceRecord(item)) }
        return out
    }

    func presenceRecord(_ item: SyncItem) throws(E) -> PresenceRecord {
        guard case .map(let m) = item else { throw .wrongType(type: type, field: "recs[]", expected: "a map") }
        func uint(_ k: String, max: UInt64 = .max) throws(E) -> UInt64 {
            guard case .unsigned(let v)? = m[k] else { throw .wrongType(type: type, field: "recs[].\(k)", expected: "an unsigned integer") }
            guard v <= max else { throw .outOfRange(type: type, field: "recs[].\(k)", reason: "at most \(max)") }
            return v
        }
        func text(_ k: String, max: Int) throws(E) -> String {
            guard case .text(let s)? = m[k] else { throw .wrongType(type: type, field: "recs[].\(k)", expected: "a text string") }
            guard s.utf8.count <= max else { throw .outOfRange(type: type, field: "recs[].\(k)", reason: "at most \(max) bytes") }
            return s
        }
        func key(_ item: SyncItem?, _ field: String) throws(E) -> [UInt8] {
            guard case .bytes(let b)? = item else { throw .wrongType(type: type, field: field, expected: "a byte string") }
            guard !b.isEmpty, b.count <= limits.maxPeerKeyBytes else { throw .outOfRange(type: type, field: field, reason: "1...\(limits.maxPeerKeyBytes) bytes") }
            return b
        }
        func object(_ k: String) throws(E) -> [String: Value] {
            guard let i = m[k] else { throw .missingField(type: type, field: "recs[].\(k)") }
            guard case .object(let o) = try value(i, field: "recs[].\(k)", depth: limits.maxValueDepth) else {
                throw .wrongType(type: type, field: "recs[].\(k)", expected: "a map")
            }
            guard CBORValueCodec.encode(.object(o)).count <= limits.maxPresenceMetadataBytes else {
                throw .outOfRange(type: type, field: "recs[].\(k)", reason: "larger than \(limits.maxPresenceMetadataBytes) bytes")
            }
            return o
        }
        guard case .bool(let cloud)? = m["cloud"] else { throw .wrongType(type: type, field: "recs[].cloud", expected: "a boolean") }
        guard case .array(let rawLinks)? = m["links"] else { throw .wrongType(type: type, field: "recs[].links", expected: "an array") }
        guard rawLinks.count <= limits.maxPresenceLinks else {
            throw .outOfRange(type: type, field: "recs[].links", reason: "at most \(limits.maxPresenceLinks) links")
        }
        var links: [PresenceLink] = []
        links.reserveCapacity(rawLinks.count)
        for l in rawLinks {
            guard case .map(let lm) = l else { throw .wrongType(type: type, field: "recs[].links[]", expected: "a map") }
            guard case .text(let t)? = lm["type"], let linkType = LinkType(rawValue: t) else {
                throw .wrongType(type: type, field: "recs[].links[].type", expected: "\"WebSocket\", \"AccessPoint\" or \"Bluetooth\"")
            }
            links.append(PresenceLink(peerKey: try key(lm["pk"], "recs[].links[].pk"), type: linkType))
        }
        let ttl = try uint("ttl")
        guard ttl >= 1 else { throw .outOfRange(type: type, field: "recs[].ttl", reason: "must be at least 1") }
        return PresenceRecord(peerKey: try key(m["pk"], "recs[].pk"), epoch: try uint("ep"), seq: try uint("seq"),
                              hops: try uint("hops", max: UInt64(limits.maxPresenceHops)), ttlMillis: ttl,
                              deviceName: try text("name", max: limits.maxDeviceNameBytes),
                              os: try text("os", max: limits.maxPresenceTextBytes), sdkVersion: try text("sdk", max: limits.maxPresenceTextBytes),
                              isConnectedToBigPeer: cloud, metadata: try object("meta"), identityMetadata: try object("idmeta"), links: links)
    }
}
