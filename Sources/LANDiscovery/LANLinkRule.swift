/// Which of two BigPeers that find each other on the LAN dials the other (docs/LOCAL-NODE.md,
/// "Two nodes on one ship"). Both see each other's advertisement; if both dialled, the pair would
/// hold two links and replicate everything twice. So exactly one side dials: the one whose peer
/// key, as the lowercase hex text advertised in TXT `pk`, sorts first byte by byte (the other
/// only accepts). Both sides compute the same answer from what they advertise, with no exchange.
/// Local nodes (`role=node`) and small peers (`role=peer`, `bigpeer peer --lan --listen`) use the
/// same rule among themselves. Between a small peer and a node the peer always dials: it is the
/// node's client, and the node serves every link it accepts.
public struct LANLinkRule: Sendable, Equatable {
    /// This side's peer key (a node's site id as 8 bytes, a small peer's key).
    public var peerKey: [UInt8]
    public var syncGroup: UInt32
    public var protocolVersion: UInt64
    /// This side's role: a node links with nodes; a small peer with small peers and with nodes.
    public var role: LANAdvertisement.Role

    public init(peerKey: [UInt8], syncGroup: UInt32, protocolVersion: UInt64, role: LANAdvertisement.Role) {
        self.peerKey = peerKey
        self.syncGroup = syncGroup
        self.protocolVersion = protocolVersion
        self.role = role
    }

    public enum Decision: Equatable, Sendable {
        /// Not a partner: our own advertisement (another instance on our database advertises
        /// the same key), another sync group or protocol version, or a small peer seen by a node.
        case ignore
        /// A partner with a higher key: this side dials it.
        case dial
        /// A partner with a lower key: it dials us; we only accept.
        case accept
    }

    public func decide(_ other: LANAdvertisement) -> Decision {
        guard other.peerKey != peerKey, other.syncGroup == syncGroup, other.protocolVersion == protocolVersion else { return .ignore }
        switch (role, other.role) {
        case (.node, .node), (.peer, .peer): return Self.dials(peerKey, other.peerKey) ? .dial : .accept
        case (.peer, .node): return .dial
        case (.node, .peer): return .ignore
        }
    }

    public func shouldDial(_ other: LANAdvertisement) -> Bool { decide(other) == .dial }

    /// Whether the side with key `mine` dials the side with key `theirs`: the hex texts compared
    /// byte-wise (a shorter text that is a prefix of the other sorts first).
    public static func dials(_ mine: [UInt8], _ theirs: [UInt8]) -> Bool {
        LANAdvertisement.hex(mine).utf8.lexicographicallyPrecedes(LANAdvertisement.hex(theirs).utf8)
    }
}
