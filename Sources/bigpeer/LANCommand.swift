import ArgumentParser
import Discovery
import Glibc
import LANDiscovery
import Logging
import Sockets
import Values

/// `bigpeer lan browse`: what mDNS shows of BigPeer nodes and peers on the LAN (`_bigpeer._tcp`),
/// as JSON lines, like `avahi-browse` for this one service type.
struct LANCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "lan", abstract: "LAN discovery tools.", subcommands: [Browse.self])

    struct Browse: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Browse _bigpeer._tcp with mDNS; print each service found, updated or lost as a JSON line.")
        @Option(help: "Seconds to browse before exiting.") var timeout = 10
        @Option(name: .customLong("lan-interface"), help: "An interface to browse on (repeatable; default: all that are up, multicast-capable and not loopback).")
        var interfaces: [String] = []

        func run() async throws {
            let group = try EventLoopGroup(threads: 1)
            defer { group.shutdown() }
            var configuration = MDNSDaemon.Configuration(hostName: "bigpeer-browse-\(UInt32.random(in: 0...UInt32.max))")
            configuration.interfaces = interfaces
            let daemon = try await MDNSDaemon(configuration: configuration, loop: group.next(),
                                              logger: Logger(label: "bigpeer.lan") { _ in SwiftLogNoOpLogHandler() })
            try await daemon.browse(try DNSName(LANAdvertisement.serviceType)) { event in
                switch event {
                case .found(let s): Output.line(Self.describe("found", s))
                case .updated(let s): Output.line(Self.describe("updated", s))
                case .lost(let name): Output.line(["event": "lost", "name": .string(name.firstLabel)])
                }
            }
            try? await Task.sleep(for: .seconds(timeout))
            await daemon.stop()
        }

        static func describe(_ event: String, _ s: DiscoveredService) -> Value {
            var txt: [String: Value] = [:]
            for e in s.txt.entries { txt[e.key] = e.value.map { .string(String(decoding: $0, as: UTF8.self)) } ?? .null }
            let addresses = s.addresses.keys.sorted().flatMap { s.addresses[$0] ?? [] }.compactMap { SocketAddress(ipBytes: $0.bytes, port: 0)?.host }
            return ["event": .string(event), "name": .string(s.instanceName), "host": .string("\(s.host)"), "port": .int(Int64(s.port)),
                    "txt": .object(txt), "addresses": .array(addresses.map(Value.string)),
                    "bigpeer": .bool(LANAdvertisement(s) != nil)]
        }
    }
}
