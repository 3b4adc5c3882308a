import Discovery
import Glibc
import LANDiscovery
import Logging
import Sockets
import SyncProtocol

/// A local node on the LAN: advertises `NAME._bigpeer._tcp.local.` with the LAN peer-link port and
/// TXT `v`, `pk` (the node's site id, hex), `g` (sync group), `role=node` (docs/LOCAL-NODE.md,
/// "Discovery"), and says goodbye on stop. The mDNS runs on an event loop of its own: anyone on
/// the LAN can send it datagrams, and a flood of them must not take time from the loops that
/// serve HTTP and sync (each datagram's work is bounded, but their number is not).
final class LANAdvertiser: Sendable {
    let daemon: MDNSDaemon
    let group: EventLoopGroup

    private init(daemon: MDNSDaemon, group: EventLoopGroup) {
        self.daemon = daemon
        self.group = group
    }

    static func start(_ configuration: LANConfiguration, port: Int, site: UInt64, logger: Logger) async throws -> LANAdvertiser {
        let name = configuration.deviceName ?? Self.hostName()
        var daemonConfiguration = MDNSDaemon.Configuration(hostName: Self.dnsLabel(name))
        daemonConfiguration.interfaces = configuration.interfaces
        let group = try EventLoopGroup(threads: 1)
        let daemon: MDNSDaemon
        do { daemon = try await MDNSDaemon(configuration: daemonConfiguration, loop: group.next(), logger: logger) } catch {
            group.shutdown()
            throw error
        }
        let advertisement = LANAdvertisement(name: name, port: UInt16(truncatingIfNeeded: port), protocolVersion: SyncProtocol.version,
                                             peerKey: LANAdvertisement.siteKey(site),
                                             syncGroup: configuration.syncGroup, role: .node)
        do {
            _ = try await daemon.advertise(try advertisement.service) { final in
                logger.notice("advertised on the LAN", metadata: ["name": "\(final)", "type": "\(LANAdvertisement.serviceType)"])
            }
        } catch {
            await daemon.stop()
            group.shutdown()
            throw error
        }
        return LANAdvertiser(daemon: daemon, group: group)
    }

    /// Goodbyes (TTL 0), then the sockets and the loop close.
    func stop() async {
        await daemon.stop()
        group.shutdown()
    }

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
