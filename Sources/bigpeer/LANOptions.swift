import ArgumentParser
import BigPeerServer
import Glibc
import Sockets
import Upstream

/// `bigpeer serve --lan ...`: a local node's LAN side (docs/LOCAL-NODE.md, "LAN").
struct LANOptions: ParsableArguments {
    @Flag(name: .customLong("lan"), help: "Accept LAN TCP peer links (the sync protocol over TCP, docs/PROTOCOL.md §2) on --lan-port, advertise them with mDNS, and link with the other nodes of --sync-group found on the LAN.")
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
    @Flag(name: .customLong("no-lan-advertise"), help: "Accept LAN peer links but do not advertise them with mDNS (and link with no other node found on the LAN).")
    var noAdvertise = false
    @Flag(name: .customLong("no-lan-link"), help: "Do not link with the other nodes of the sync group found on the LAN (accept their links only).")
    var noLink = false
    @Option(name: .customLong("lan-subscribe"), help: "A SELECT * FROM collection [WHERE ...] this node downloads from the nodes it dials on the LAN, besides what its own sync peers subscribe to (repeatable; give every node of the group the same).")
    var subscriptions: [String] = []
    @Option(name: .customLong("lan-key"), help: "API key this node presents to the nodes it dials on the LAN (default: $BIGPEER_LAN_KEY; none with neither).")
    var key: String?
    @Option(name: .customLong("lan-jwt-file"), help: "File holding a JWT this node presents to the nodes it dials on the LAN instead of --lan-key.")
    var jwtFile: String?
    @Option(name: .customLong("lan-link-grace"), help: "Seconds a LAN node that stopped advertising (goodbye or expiry) keeps its link.")
    var graceSeconds = 30
    @Option(name: .customLong("lan-forget-after"), help: "Seconds after which a LAN node not seen has its replication row deleted, so it no longer holds the change log back (default: 7 days).")
    var forgetAfterSeconds = 7 * 86_400

    func validate() throws {
        if !enabled && (tls || port != LANConfiguration().port || host != LANConfiguration().host || !interfaces.isEmpty || deviceName != nil
                        || syncGroup != 0 || noAdvertise) {
            throw ValidationError("--lan-port, --lan-host, --lan-tls, --lan-interface, --device-name, --sync-group and --no-lan-advertise need --lan")
        }
        if !enabled && (noLink || !subscriptions.isEmpty || key != nil || jwtFile != nil || graceSeconds != 30 || forgetAfterSeconds != 7 * 86_400) {
            throw ValidationError("--no-lan-link, --lan-subscribe, --lan-key, --lan-jwt-file, --lan-link-grace and --lan-forget-after need --lan")
        }
        if key != nil && jwtFile != nil { throw ValidationError("--lan-key and --lan-jwt-file exclude each other") }
        if !(0...86_400).contains(graceSeconds) { throw ValidationError("--lan-link-grace must be 0...86400 seconds") }
        if forgetAfterSeconds < 1 { throw ValidationError("--lan-forget-after must be at least 1 second") }
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
        if noLink || noAdvertise {  // the nodes are found by the advertiser's mDNS
            c.mesh = nil
        } else {
            var mesh = LANMeshConfiguration()
            mesh.subscriptions = subscriptions
            let lanKey = key ?? getenv("BIGPEER_LAN_KEY").map { String(cString: $0) }
            mesh.credentials = jwtFile.map { .jwtFile($0) } ?? lanKey.map { .apiKey($0) }
            if let jwtFile, FileBytes.read(jwtFile, maxBytes: 16 << 10) == nil { throw ValidationError("cannot read --lan-jwt-file \(jwtFile)") }
            mesh.grace = .seconds(graceSeconds)
            mesh.forgetAfter = .seconds(forgetAfterSeconds)
            c.mesh = mesh
        }
        return c
    }
}
