// The presence graph as an application sees it (Ditto's shape: `localPeer`, `remotePeers`, each
// with its `connections`), computed from the gossip's records (PresenceGossip.swift).
//
// A connection between two remote peers is shown when both of their records list it, or when one
// of them publishes no record (a peer without presence support): a stale record of a peer that
// left, still listing its old link, then does not keep it in the graph. The local peer's
// connections are its links. Remote peers are those reachable from the local peer over shown
// connections, however many hops away; records of unreachable peers are kept until they expire
// but not shown.

import Values

public struct PresenceGraph: Sendable, Equatable {
    public struct Connection: Sendable, Equatable, Hashable {
        /// `<key1><-><key2>:<type>`, the keys in ascending order (stable for any two peers and a type).
        public var id: String
        public var peerKey1: String
        public var peerKey2: String
        public var type: LinkType
    }

    public struct Peer: Sendable, Equatable {
        public var peerKey: String
        public var deviceName: String
        public var os: String
        public var sdkVersion: String
        public var isConnectedToBigPeer: Bool
        public var metadata: [String: Value]
        public var identityMetadata: [String: Value]
        public var connections: [Connection]
    }

    public var localPeer: Peer
    public var remotePeers: [Peer]

    /// A peer key as text: `pk` and the key in base64url without padding.
    public static func keyString(_ key: [UInt8]) -> String { "pk" + Base64.encode(key, .url) }

    public func peer(_ key: String) -> Peer? { key == localPeer.peerKey ? localPeer : remotePeers.first { $0.peerKey == key } }

    /// The JSON of `GET /api/v4/presence` and `bigpeer peer --presence`: Ditto's field names, with
    /// `peerKeyString`, `isConnectedToDittoCloud` and `connectionType` as aliases of ours.
    public var json: Value {
        func connection(_ c: Connection) -> Value {
            .object(["id": .string(c.id), "peerKeyString1": .string(c.peerKey1), "peerKeyString2": .string(c.peerKey2),
                     "type": .string(c.type.rawValue), "connectionType": .string(c.type.rawValue)])
        }
        func peer(_ p: Peer) -> Value {
            .object(["peerKey": .string(p.peerKey), "peerKeyString": .string(p.peerKey), "deviceName": .string(p.deviceName),
                     "os": .string(p.os), "sdkVersion": .string(p.sdkVersion),
                     "isConnectedToBigPeer": .bool(p.isConnectedToBigPeer), "isConnectedToDittoCloud": .bool(p.isConnectedToBigPeer),
                     "peerMetadata": .object(p.metadata), "identityServiceMetadata": .object(p.identityMetadata),
                     "connections": .array(p.connections.map(connection))])
        }
        return .object(["localPeer": peer(localPeer), "remotePeers": .array(remotePeers.map(peer))])
    }
}

extension PresenceGossip {
    /// The graph as of `now` (records past their expiry are left out even before `tick` drops them).
    public func graph(now: UInt64) -> PresenceGraph {
        typealias Edge = (a: [UInt8], b: [UInt8], type: LinkType)
        var live: [[UInt8]: PresenceRecord] = [:]
        for (k, s) in records where s.expiresAt > now { live[k] = s.record }
        // Direct links: their peers' records (if any) for details, the handshake's otherwise.
        var direct: [[UInt8]: DirectPeer] = [:]
        for l in links.values where !l.isSibling && direct[l.peerKey] == nil { direct[l.peerKey] = l.peer ?? DirectPeer(deviceName: "") }

        var edges: [Edge] = Self.sorted(Set(ownLinks + siblingLinks)).map { (own.peerKey, $0.peerKey, $0.type) }
        for (key, r) in live {
            for l in r.links where l.peerKey != own.peerKey {
                // Each such pair once: from the side with the smaller key, or from the only side with a record.
                if let other = live[l.peerKey] {
                    guard key.lexicographicallyPrecedes(l.peerKey), other.links.contains(PresenceLink(peerKey: key, type: l.type)) else { continue }
                } else if direct[l.peerKey] != nil {
                    continue  // a direct peer with no record of its own: only our link to it is known
                }
                edges.append((key, l.peerKey, l.type))
            }
        }
        var adjacent: [[UInt8]: [Int]] = [:]
        for (i, e) in edges.enumerated() {
            adjacent[e.a, default: []].append(i)
            adjacent[e.b, default: []].append(i)
        }
        var reached: Set<[UInt8]> = [own.peerKey]
        var queue = [own.peerKey]
        while let k = queue.popLast() {
            for i in adjacent[k] ?? [] {
                let other = edges[i].a == k ? edges[i].b : edges[i].a
                if reached.insert(other).inserted { queue.append(other) }
            }
        }
        func connection(_ e: Edge) -> PresenceGraph.Connection {
            let (x, y) = e.a.lexicographicallyPrecedes(e.b) ? (e.a, e.b) : (e.b, e.a)
            let (kx, ky) = (PresenceGraph.keyString(x), PresenceGraph.keyString(y))
            return .init(id: "\(kx)<->\(ky):\(e.type.rawValue)", peerKey1: kx, peerKey2: ky, type: e.type)
        }
        func connections(of key: [UInt8]) -> [PresenceGraph.Connection] {
            Array(Set((adjacent[key] ?? []).map { connection(edges[$0]) })).sorted { $0.id < $1.id }
        }
        func peer(_ key: [UInt8]) -> PresenceGraph.Peer {
            let r = key == own.peerKey ? own : live[key]
            let d = direct[key]
            return PresenceGraph.Peer(peerKey: PresenceGraph.keyString(key), deviceName: r?.deviceName ?? d?.deviceName ?? "",
                                      os: r?.os ?? "", sdkVersion: r?.sdkVersion ?? "", isConnectedToBigPeer: r?.isConnectedToBigPeer ?? false,
                                      metadata: r?.metadata ?? d?.metadata ?? [:],
                                      identityMetadata: d?.identityMetadata ?? r?.identityMetadata ?? [:],
                                      connections: connections(of: key))
        }
        let remote = reached.subtracting([own.peerKey]).sorted { $0.lexicographicallyPrecedes($1) }.map(peer)
        return PresenceGraph(localPeer: peer(own.peerKey), remotePeers: remote)
    }
}
