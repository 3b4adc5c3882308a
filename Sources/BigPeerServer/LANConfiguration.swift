import Upstream

/// A local node's LAN side (`bigpeer serve --lan`, docs/LOCAL-NODE.md "LAN"): LAN TCP peer links
/// that speak the sync protocol with the stream framing of PROTOCOL.md §2.
public struct LANConfiguration: Sendable {
    /// Where peer links are accepted: every address by default ("::" also takes IPv4 peers).
    public var host = "::"
    /// 0: any free port (tests).
    public var port = 4040
    /// TLS on peer links with the server's certificate (`--tls-cert`, `--tls-key`).
    public var tls = false
    /// Advertise the node with mDNS/DNS-SD (`NAME._bigpeer._tcp.local.`); off: links only.
    public var advertise = true
    /// Interfaces mDNS runs on, by name; empty: every interface that is up, not loopback and
    /// multicast-capable.
    public var interfaces: [String] = []
    /// The instance name advertised (and the host name claimed); nil: this machine's host name.
    public var deviceName: String?
    /// Only nodes and peers of the same sync group link with each other (TXT `g`).
    public var syncGroup: UInt32 = 0
    /// Linking with the other nodes of the sync group found on the LAN (they are found by the
    /// mDNS browsing that runs with `advertise`); nil: off.
    public var mesh: LANMeshConfiguration? = LANMeshConfiguration()

    public init() {}
}

/// How a node links with the other local nodes of its sync group that it finds on the LAN
/// (`LANMesh`, docs/LOCAL-NODE.md "Two nodes on one ship").
public struct LANMeshConfiguration: Sendable {
    /// `SELECT * FROM c [WHERE ...]` queries this node downloads from the nodes it dials, on top
    /// of what its own sync peers subscribe to (`--lan-subscribe`).
    public var subscriptions: [String] = []
    /// Credentials for the nodes it dials (`--lan-key`, `--lan-jwt-file`); nil: none (they run `--insecure-dev`).
    public var credentials: UpstreamConfiguration.Credentials?
    /// How long a node that stopped advertising keeps its link (`--lan-link-grace`).
    public var grace: Duration = .seconds(30)
    /// A dialled node not advertised for this long has its `bigpeer_upstream` row deleted, so it
    /// stops holding the change log back (`--lan-forget-after`).
    public var forgetAfter: Duration = .seconds(7 * 86_400)
    /// Longest wait between attempts to reach a dialled node.
    public var reconnectMax: Duration = .seconds(10)
    /// How often the grace periods are looked at.
    public var tickInterval: Duration = .milliseconds(250)
    /// With several instances on one database: how often a standby instance tries to take a
    /// link's replication lock (`UpstreamLease`).
    public var leaseRetryInterval: Duration = .seconds(5)

    public init() {}

    /// How often the rows of dialled nodes are marked seen and stale ones deleted.
    var sweepInterval: Duration { max(.milliseconds(100), min(forgetAfter / 4, .seconds(600))) }
}
