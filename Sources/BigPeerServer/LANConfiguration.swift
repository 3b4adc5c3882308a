/// A local node's LAN side (`bigpeer serve --lan`, docs/LOCAL-NODE.md "LAN"): LAN TCP peer links
/// that speak the sync protocol with the stream framing of PROTOCOL.md §2.
public struct LANConfiguration: Sendable {
    /// Where peer links are accepted: every address by default ("::" also takes IPv4 peers).
    public var host = "::"
    /// 0: any free port (tests).
    public var port = 4040
    /// TLS on peer links with the server's certificate (`--tls-cert`, `--tls-key`).
    public var tls = false

    public init() {}
}
