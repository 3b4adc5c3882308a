import ArgumentParser
import BigPeerServer

/// `bigpeer serve --lan ...`: a local node's LAN side (docs/LOCAL-NODE.md, "LAN").
struct LANOptions: ParsableArguments {
    @Flag(name: .customLong("lan"), help: "Accept LAN TCP peer links (the sync protocol over TCP, docs/PROTOCOL.md §2) on --lan-port.")
    var enabled = false
    @Option(name: .customLong("lan-port"), help: "TCP port of LAN peer links (0: any free port).")
    var port = LANConfiguration().port
    @Option(name: .customLong("lan-host"), help: "Address LAN peer links are accepted on (:: takes IPv4 and IPv6).")
    var host = LANConfiguration().host
    @Flag(name: .customLong("lan-tls"), help: "TLS on LAN peer links, with the certificate of --tls-cert and --tls-key.")
    var tls = false

    func validate() throws {
        if !enabled && (tls || port != LANConfiguration().port || host != LANConfiguration().host) {
            throw ValidationError("--lan-port, --lan-host and --lan-tls need --lan")
        }
        if !(0...65535).contains(port) { throw ValidationError("--lan-port must be 0...65535") }
    }

    /// The configuration, or nil without `--lan`.
    func configuration(serverHasTLS: Bool) throws -> LANConfiguration? {
        guard enabled else { return nil }
        if tls && !serverHasTLS { throw ValidationError("--lan-tls needs --tls-cert and --tls-key") }
        var c = LANConfiguration()
        c.host = host
        c.port = port
        c.tls = tls
        return c
    }
}
