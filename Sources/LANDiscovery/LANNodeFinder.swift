import Discovery
import Logging
import Sockets
import Synchronization

/// Finds a BigPeer on the LAN by mDNS/DNS-SD (`_bigpeer._tcp`): what `bigpeer peer --lan` and a
/// SmallPeer app use instead of a configured URL (docs/LOCAL-NODE.md, "Discovery").
public enum LANNodeFinder {
    public struct Found: Sendable, Equatable {
        public var advertisement: LANAdvertisement
        /// `tcp://ADDRESS:PORT` for `SyncClient` / `SyncLink` (an IPv4 address when the node has
        /// one, else a global IPv6 one).
        public var url: String
    }

    public enum FindError: Error, CustomStringConvertible {
        case notFound(seconds: Int64, seen: [String])
        public var description: String {
            switch self {
            case .notFound(let seconds, let seen):
                "no BigPeer of this sync group answered on the LAN within \(seconds) s"
                    + (seen.isEmpty ? "" : " (seen, other groups or roles: \(seen.joined(separator: ", ")))")
            }
        }
    }

    /// Browses until the first advertisement of `syncGroup` with role `role` (a node by default)
    /// that has a usable address, or `timeout`.
    public static func find(syncGroup: UInt32, role: LANAdvertisement.Role = .node, interfaces: [String] = [], timeout: Duration,
                            logger: Logger) async throws -> Found {
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        var configuration = MDNSDaemon.Configuration(hostName: "bigpeer-peer-\(UInt32.random(in: 0...UInt32.max))")
        configuration.interfaces = interfaces
        let daemon = try await MDNSDaemon(configuration: configuration, loop: group.next(), logger: logger)
        let state = Mutex<(found: Found?, seen: [String])>((nil, []))
        try await daemon.browse(try DNSName(LANAdvertisement.serviceType)) { event in
            let service: DiscoveredService
            switch event {
            case .found(let s), .updated(let s): service = s
            case .lost: return
            }
            guard let ad = LANAdvertisement(service) else { return }
            guard ad.syncGroup == syncGroup, ad.role == role, let url = Self.url(service) else {
                state.withLock { if !$0.seen.contains(ad.name) { $0.seen.append(ad.name) } }
                return
            }
            state.withLock { if $0.found == nil { $0.found = Found(advertisement: ad, url: url) } }
        }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, state.withLock({ $0.found }) == nil {
            try? await Task.sleep(for: .milliseconds(10))
        }
        await daemon.stop()
        if let found = state.withLock({ $0.found }) { return found }
        throw FindError.notFound(seconds: timeout.components.seconds, seen: state.withLock { $0.seen })
    }

    /// The URL to dial: an IPv4 address if any, else a global IPv6 one, else a link-local IPv6
    /// one with the interface it was seen on as its zone (`[fe80::1%253]`, RFC 6874).
    static func url(_ service: DiscoveredService) -> String? {
        let all = service.addresses.keys.sorted().flatMap { service.addresses[$0] ?? [] }
        if let v4 = all.first(where: \.isIPv4) { return "tcp://\(v4):\(service.port)" }
        if let v6 = all.first(where: { !$0.isIPv4 && !Self.isLinkLocal($0) }) {
            return SocketAddress(ipBytes: v6.bytes, port: 0).map { "tcp://[\($0.host)]:\(service.port)" }
        }
        for interface in service.addresses.keys.sorted() {
            guard let v6 = service.addresses[interface]?.first(where: { !$0.isIPv4 && Self.isLinkLocal($0) }),
                  let address = SocketAddress(ipBytes: v6.bytes, port: 0) else { continue }
            return "tcp://[\(address.host)%25\(interface.index)]:\(service.port)"
        }
        return nil
    }

    /// fe80::/10.
    static func isLinkLocal(_ address: IPAddress) -> Bool {
        let b = address.bytes
        return b.count == 16 && b[0] == 0xFE && b[1] & 0xC0 == 0x80
    }
}
