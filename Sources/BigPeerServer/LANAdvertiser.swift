import Discovery
import Glibc
import LANDiscovery
import Logging
import Sockets
import SyncProtocol

/// A local node on the LAN: advertises `NAME._bigpeer._tcp.local.` with the LAN peer-link port and
/// TXT `v`, `pk` (the node's site id, hex), `g` (sync group), `role=node` (docs/LOCAL-NODE.md,
/// "Discovery"), and says goodbye on stop. The mDNS runs on one loop of the server's group.
final class LANAdvertiser: Sendable {
    let daemon: MDNSDaemon

    private init(daemon: MDNSDaemon) { self.daemon = daemon }

    static func start(_ configuration: LANConfiguration, port: Int, site: UInt64, loop: EventLoop, logger: Logger) async throws -> LANAdvertiser {
        let name = configuration.deviceName ?? Self.hostName()
        var daemonConfiguration = MDNSDaemon.Configuration(hostName: Self.dnsLabel(name))
        daemonConfiguration.interfaces = configuration.interfaces
        let daemon = try await MDNSDaemon(configuration: daemonConfiguration, loop: loop, logger: logger)
        let advertisement = LANAdvertisement(name: name, port: UInt16(truncatingIfNeeded: port), protocolVersion: SyncProtocol.version,
                                             peerKey: (0..<8).map { UInt8(truncatingIfNeeded: site >> (56 - 8 * $0)) },
                                             syncGroup: configuration.syncGroup, role: .node)
        do {
            _ = try await daemon.advertise(try advertisement.service) { final in
                logger.notice("advertised on the LAN", metadata: ["name": "\(final)", "type": "\(LANAdvertisement.serviceType)"])
            }
        } catch {
            await daemon.stop()
            throw error
        }
        return LANAdvertiser(daemon: daemon)
    }

    /// Goodbyes (TTL 0), then the sockets close.
    func stop() async { await daemon.stop() }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "bigpeer" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "bigpeer" : name
    }

    /// A host label from a device name: letters, digits and hyphens, at most 63 bytes.
    static func dnsLabel(_ name: String) -> String {
        let label = String(name.unicodeScalars.map { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0)) ? Character($0) : "-" }.prefix(63))
        return label.isEmpty ? "bigpeer" : label
    }
}
