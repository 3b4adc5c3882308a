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

    public init() {}
}
