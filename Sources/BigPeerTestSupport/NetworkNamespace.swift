import Foundation
import Glibc
import Synchronization

/// A network namespace made by a test (`ip netns add`), with its loopback up and IPv6 duplicate
/// address detection off (addresses are usable at once). Multicast tests run only inside such
/// namespaces, joined by veth pairs or a bridge made here too: never on a real interface.
/// Needs root and iproute2. Names are unique per process and call, so tests can run in parallel.
public final class NetworkNamespace: Sendable {
    public let name: String
    public var path: String { "/var/run/netns/\(name)" }

    private static let counter = Atomic<Int>(0)

    /// Whether this process may make namespaces and enter them (root). The suites that need them
    /// are enabled only then: as another user they show as skipped, with this reason.
    public static let canCreate = geteuid() == 0
    public static let whyNot = "network namespaces need root (CI runs the suite as root)"

    private init(name: String) { self.name = name }

    public static func create() async throws -> NetworkNamespace {
        let name = "bp\(getpid())n\(counter.add(1, ordering: .relaxed).newValue)"
        try await ip(["netns", "add", name])
        let ns = NetworkNamespace(name: name)
        try await ns.exec(["ip", "link", "set", "lo", "up"])
        // (Not sysctl(8): procps may be missing on a fresh machine; /proc/sys shows this namespace.)
        try await ns.exec(["sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad; echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad"])
        return ns
    }

    /// Runs a command inside the namespace; throws if it fails.
    @discardableResult
    public func exec(_ command: [String]) async throws -> String {
        try await Self.ip(["netns", "exec", name] + command)
    }

    public func delete() async {
        _ = try? await Self.ip(["netns", "del", name])
    }

    /// Connects `a` and `b` with a veth pair and gives each end an address (CIDR, e.g.
    /// `10.1.0.1/24`; IPv6 link-local addresses come by themselves). Returns the interface names.
    @discardableResult
    public static func link(_ a: NetworkNamespace, _ aAddress: String, _ b: NetworkNamespace, _ bAddress: String) async throws -> (String, String) {
        let n = counter.add(1, ordering: .relaxed).newValue
        let (ea, eb) = ("va\(getpid() % 100_000)x\(n)", "vb\(getpid() % 100_000)x\(n)")
        try await ip(["link", "add", ea, "netns", a.name, "type", "veth", "peer", "name", eb, "netns", b.name])
        try await a.exec(["ip", "addr", "add", aAddress, "dev", ea])
        try await b.exec(["ip", "addr", "add", bAddress, "dev", eb])
        try await a.exec(["ip", "link", "set", ea, "up"])
        try await b.exec(["ip", "link", "set", eb, "up"])
        return (ea, eb)
    }

    /// A bridge in a namespace of its own joining every member (each gets a veth to it and the
    /// given address). Multicast snooping is off: with no querier on the bridge, snooping would
    /// stop forwarding mDNS a few minutes after the last join.
    public static func bridge(_ members: [(NetworkNamespace, String)]) async throws -> NetworkNamespace {
        let hub = try await create()
        try await hub.exec(["ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
        try await hub.exec(["ip", "link", "set", "br0", "up"])
        for (member, address) in members {
            let n = counter.add(1, ordering: .relaxed).newValue
            let (inner, port) = ("vm\(getpid() % 100_000)x\(n)", "vp\(getpid() % 100_000)x\(n)")
            try await ip(["link", "add", inner, "netns", member.name, "type", "veth", "peer", "name", port, "netns", hub.name])
            try await member.exec(["ip", "addr", "add", address, "dev", inner])
            try await member.exec(["ip", "link", "set", inner, "up"])
            try await hub.exec(["ip", "link", "set", port, "master", "br0"])
            try await hub.exec(["ip", "link", "set", port, "up"])
        }
        return hub
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    @discardableResult
    static func ip(_ args: [String]) async throws -> String {
        let out = try await TestCommand.run("/usr/sbin/ip", args)
        guard out.status == 0 else {
            throw Failure(description: "ip \(args.joined(separator: " ")) failed (\(out.status)): \(out.err) — network-namespace tests need root and iproute2")
        }
        return out.out
    }
}
