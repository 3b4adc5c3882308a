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
    @Option(name: .customLong("lan-interface"), help: "An interface mDNS advertises on (repeatable; default: every interface that is up, multicast-capable and not loopback).")
    var interfaces: [String] = []
    @Option(name: .customLong("device-name"), help: "The name this node advertises on the LAN (default: the host name).")
    var deviceName: String?
    @Option(name: .customLong("sync-group"), help: "Only nodes and peers of the same sync group link with each other (advertised in TXT g).")
    var syncGroup: UInt32 = 0
    @Flag(name: .customLong("no-lan-advertise"), help: "Accept LAN peer links but do not advertise them with mDNS.")
    var noAdvertise = false

    func validate() throws {
        if !enabled && (tls || port != LANConfiguration().port || host != LANConfiguration().host || !interfaces.isEmpty || deviceName != nil
                        || syncGroup != 0 || noAdvertise) {
            throw ValidationError("--lan-port, --lan-host, --lan-tls, --lan-interface, --device-name, --sync-group and --no-lan-advertise need --lan")
        }
        if !(0...65535).contains(port) { throw ValidationError("--lan-port must be 0...65535") }
        if let deviceName, deviceName.isEmpty || deviceName.utf8.count > 63 {
            throw ValidationError("--device-name must be 1...63 bytes (one DNS label)")
        }
    }

    /// The configuration, or nil without `--lan`.
    func configuration(serverHasTLS: Bool) throws -> LANConfiguration? {
        guard enabled else { return nil }
        if tls && !serverHasTLS { throw ValidationError("--lan-tls needs --tls-cert and --tls-key") }
        var c = LANConfiguration()
        c.host = host
        c.port = port
        c.tls = tls
        c.interfaces = interfaces
        c.deviceName = deviceName
        c.syncGroup = syncGroup
        c.advertise = !noAdvertise
        return c
    }
}
