// mDNS on the wire: the sans-I/O `MDNSResponder` and `MDNSBrowser` (Sources/Discovery) driven by
// real sockets on one event loop (docs/DISCOVERY.md, "The interface the socket layer uses").
//
//   interfaces (getifaddrs, every `pollInterval`) ─▶ join 224.0.0.251 / ff02::fb, setInterface
//   UDPMulticastSocket (v4, v6; port 5353) ─datagram─▶ responder + every browser ─actions─▶ send / events
//   one loop timer at the earliest `nextWakeup` ─▶ tick
//
// **Threading.** Everything of a daemon runs on its loop (`MDNSDaemonCore`); `MDNSDaemon` is the
// thread-safe face that hops there. Browser events are handed to their callbacks on the loop.

import Discovery
import Glibc
import Logging
import Sockets

public final class MDNSDaemon: Sendable {
    public struct Configuration: Sendable {
        /// The host name to claim (`NAME.local.`; renamed `NAME-2` on a conflict).
        public var hostName: String
        /// Interfaces to use, by name; empty: every interface that is up, not loopback and multicast-capable.
        public var interfaces: [String] = []
        /// How often the interfaces and their addresses are looked at again (RFC 6762 §8.3:
        /// re-probe and re-announce on a change; goodbyes for an interface that went away).
        public var pollInterval: Duration = .seconds(2)
        public var port = Int(mdnsPort)

        public init(hostName: String) { self.hostName = hostName }
    }

    let core: LoopBound<MDNSDaemonCore>

    /// Opens the sockets on `loop` and starts watching interfaces. Throws when neither IPv4 nor
    /// IPv6 can be opened.
    public init(configuration: Configuration, loop: EventLoop, logger: Logger) async throws {
        core = try await loop.submit {
            let core = try MDNSDaemonCore(configuration: configuration, loop: loop, logger: logger)
            core.start()
            return LoopBound(core, loop: loop)
        }
    }

    /// Advertises `service`; its final name (after any conflict) comes with `onName`.
    public func advertise(_ service: MDNSService, onName: @escaping @Sendable (String) -> Void = { _ in }) async throws -> MDNSServiceID {
        let core = self.core
        return try await core.loop.submit { try core.value.advertise(service, onName: onName) }
    }

    /// Browses `serviceType`; `onEvent` runs on the daemon's loop.
    public func browse(_ serviceType: DNSName, onEvent: @escaping @Sendable (MDNSBrowserEvent) -> Void) async throws {
        let core = self.core
        try await core.loop.submit { core.value.browse(serviceType, onEvent: onEvent) }
    }

    public func counters() async throws -> (responder: MDNSResponderCounters, browsers: [MDNSBrowserCounters]) {
        let core = self.core
        return try await core.loop.submit { (core.value.responder.counters, core.value.browsers.map(\.browser.counters)) }
    }

    /// Says goodbye (TTL 0) for everything advertised, then closes the sockets.
    public func stop() async {
        let core = self.core
        _ = try? await core.loop.submit { core.value.stop() }
    }
}

final class MDNSDaemonCore {
    struct Browsing {
        var browser: MDNSBrowser
        let onEvent: @Sendable (MDNSBrowserEvent) -> Void
    }

    let configuration: MDNSDaemon.Configuration
    let loop: EventLoop
    let logger: Logger
    var responder: MDNSResponder
    var browsers: [Browsing] = []
    private var v4: UDPMulticastSocket?
    private var v6: UDPMulticastSocket?
    /// Interfaces in use, with what was last told to the state machines.
    private var interfaces: [Int32: NetworkInterface] = [:]
    private var nameCallbacks: [MDNSServiceID: @Sendable (String) -> Void] = [:]
    private var wakeTimer: (timer: TimerID, at: Int64)?
    private var pollTimer: TimerID?
    private var stopped = false

    init(configuration: MDNSDaemon.Configuration, loop: EventLoop, logger: Logger) throws {
        self.configuration = configuration
        self.loop = loop
        self.logger = logger
        responder = try MDNSResponder(configuration: MDNSResponderConfiguration(hostName: configuration.hostName))
        var failures: [String] = []
        do { v4 = try UDPMulticastSocket(family: AF_INET, port: configuration.port, loop: loop) { [weak self] in self?.received($0) } } catch {
            failures.append("IPv4: \(error)")
        }
        do { v6 = try UDPMulticastSocket(family: AF_INET6, port: configuration.port, loop: loop) { [weak self] in self?.received($0) } } catch {
            failures.append("IPv6: \(error)")
        }
        if v4 == nil && v6 == nil { throw MDNSDaemonError.noSockets(failures.joined(separator: "; ")) }
        for failure in failures { logger.warning("mDNS: one address family is unavailable", metadata: ["error": "\(failure)"]) }
    }

    static func now() -> Int64 { Int64(NanoTime.now().nanoseconds / 1_000_000) }

    func start() {
        pollInterfaces()
    }

    func advertise(_ service: MDNSService, onName: @escaping @Sendable (String) -> Void) throws -> MDNSServiceID {
        let id = try responder.register(service, now: Self.now())
        nameCallbacks[id] = onName
        rearm()
        return id
    }

    func browse(_ serviceType: DNSName, onEvent: @escaping @Sendable (MDNSBrowserEvent) -> Void) {
        var browsing = Browsing(browser: MDNSBrowser(configuration: MDNSBrowserConfiguration(serviceType: serviceType)), onEvent: onEvent)
        let now = Self.now()
        for index in interfaces.keys.sorted() { browsing.browser.addInterface(InterfaceID(UInt32(index)), now: now) }
        browsers.append(browsing)
        tick()  // its first query goes out at once
    }

    func stop() {
        guard !stopped else { return }
        perform(responder.shutdown(now: Self.now()))
        stopped = true
        if let t = wakeTimer?.timer { loop.cancelTimer(t) }
        if let t = pollTimer { loop.cancelTimer(t) }
        v4?.close()
        v6?.close()
    }

    // MARK: - Interfaces

    /// Looks at the interfaces again: new ones are joined and announced on, changed addresses
    /// re-announced, vanished ones get goodbyes.
    private func pollInterfaces() {
        guard !stopped else { return }
        let now = Self.now()
        let current = NetworkInterface.current().filter { i in
            configuration.interfaces.isEmpty ? (i.isUp && !i.isLoopback && i.supportsMulticast) : configuration.interfaces.contains(i.name) && i.isUp
        }
        var seen = Set<Int32>()
        for interface in current where interface.index > 0 {
            seen.insert(interface.index)
            let id = InterfaceID(UInt32(interface.index))
            let previous = interfaces[interface.index]
            guard previous != interface else { continue }
            if previous == nil {
                if !interface.ipv4.isEmpty { join(v4, "224.0.0.251", interface) }
                if !interface.ipv6.isEmpty { join(v6, "ff02::fb", interface) }
            }
            interfaces[interface.index] = interface
            perform(responder.setInterface(id, addresses: Self.addresses(of: interface), now: now))
            if previous == nil {
                for i in browsers.indices { browsers[i].browser.addInterface(id, now: now) }
            }
        }
        for (index, interface) in interfaces where !seen.contains(index) {
            let id = InterfaceID(UInt32(index))
            perform(responder.removeInterface(id, now: now))
            for i in browsers.indices { perform(browsers[i].browser.removeInterface(id, now: now), browser: i) }
            v4?.leave(group: "224.0.0.251", interfaceIndex: index)
            v6?.leave(group: "ff02::fb", interfaceIndex: index)
            interfaces[index] = nil
            logger.info("mDNS: interface gone", metadata: ["interface": "\(interface.name)"])
        }
        rearm()
        pollTimer = loop.scheduleTimer(after: configuration.pollInterval) { [weak self] in self?.pollInterfaces() }
    }

    private func join(_ socket: UDPMulticastSocket?, _ group: String, _ interface: NetworkInterface) {
        guard let socket else { return }
        do { try socket.join(group: group, interfaceIndex: interface.index) } catch {
            logger.warning("mDNS: cannot join the group", metadata: ["group": "\(group)", "interface": "\(interface.name)", "error": "\(error)"])
        }
    }

    static func addresses(of interface: NetworkInterface) -> [IPAddress] {
        let v4 = interface.ipv4.compactMap { (try? SocketAddress(ip: $0, port: 0)).flatMap { IPAddress(bytes: $0.ipBytes) } }
        let v6 = interface.ipv6.compactMap { (try? SocketAddress(ip: $0, port: 0)).flatMap { IPAddress(bytes: $0.ipBytes) } }
        return v4 + v6
    }

    // MARK: - Packets

    private func received(_ datagram: UDPMulticastSocket.Datagram) {
        guard !stopped, let address = IPAddress(bytes: datagram.source.ipBytes) else { return }
        let packet = ReceivedPacket(bytes: datagram.bytes, interface: InterfaceID(UInt32(bitPattern: datagram.interfaceIndex)),
                                    source: Endpoint(address: address, port: UInt16(truncatingIfNeeded: datagram.source.port)),
                                    viaMulticast: datagram.toGroup)
        let now = Self.now()
        perform(responder.receive(packet, now: now))
        for i in browsers.indices { perform(browsers[i].browser.receive(packet, now: now), browser: i) }
        rearm()
    }

    private func perform(_ actions: [MDNSResponderAction]) {
        for action in actions {
            switch action {
            case .send(let packet): send(packet)
            case .event(let event): responderEvent(event)
            }
        }
    }

    private func perform(_ actions: [MDNSBrowserAction], browser index: Int) {
        for action in actions {
            switch action {
            case .send(let packet): send(packet)
            case .event(let event): browsers[index].onEvent(event)
            }
        }
    }

    private func responderEvent(_ event: MDNSResponderEvent) {
        switch event {
        case .hostNameEstablished(let name):
            logger.info("mDNS: host name established", metadata: ["name": "\(name)"])
        case .serviceEstablished(let id, let name):
            logger.notice("mDNS: advertising", metadata: ["name": "\(name)"])
            nameCallbacks[id]?(name.firstLabel)
        case .hostRenamed(let from, let to):
            logger.notice("mDNS: host name conflict, renamed", metadata: ["from": "\(from)", "to": "\(to)"])
        case .serviceRenamed(let id, let from, let to):
            logger.notice("mDNS: service name conflict, renamed", metadata: ["from": "\(from)", "to": "\(to)"])
            nameCallbacks[id]?(to.firstLabel)
        }
    }

    private func send(_ packet: OutgoingPacket) {
        guard !stopped else { return }
        let index = Int32(bitPattern: packet.interface.index)
        guard let interface = interfaces[index] else { return }
        switch packet.destination {
        case .multicast:
            // The group of every family the interface has (answers list its v4 and v6 addresses alike).
            if let v4, let source = interface.ipv4.first, let group = try? SocketAddress(ip: "224.0.0.251", port: configuration.port) {
                v4.send(packet.bytes, to: group, interfaceIndex: index, source: try? SocketAddress(ip: source, port: 0))
            }
            if let v6, !interface.ipv6.isEmpty, let group = SocketAddress(ipBytes: IPAddress.mdnsV6Group, port: configuration.port, scopeID: UInt32(index)) {
                v6.send(packet.bytes, to: group, interfaceIndex: index)
            }
        case .unicast(let endpoint):
            let bytes = endpoint.address.bytes
            guard let to = SocketAddress(ipBytes: bytes, port: Int(endpoint.port), scopeID: bytes.count == 16 ? UInt32(index) : 0) else { return }
            if endpoint.address.isIPv4 {
                v4?.send(packet.bytes, to: to, interfaceIndex: index, source: interface.ipv4.first.flatMap { try? SocketAddress(ip: $0, port: 0) })
            } else {
                v6?.send(packet.bytes, to: to, interfaceIndex: index)
            }
        }
    }

    // MARK: - Timer

    /// One loop timer at the earliest wake-up any state machine asked for.
    private func rearm() {
        guard !stopped else { return }
        let wakeups = [responder.nextWakeup] + browsers.map(\.browser.nextWakeup)
        guard let next = wakeups.compactMap({ $0 }).min() else {
            if let t = wakeTimer?.timer { loop.cancelTimer(t) }
            wakeTimer = nil
            return
        }
        if let current = wakeTimer, current.at == next { return }
        if let t = wakeTimer?.timer { loop.cancelTimer(t) }
        let delay = max(0, next - Self.now())
        wakeTimer = (loop.scheduleTimer(after: .milliseconds(delay)) { [weak self] in self?.tick() }, next)
    }

    private func tick() {
        if let t = wakeTimer?.timer { loop.cancelTimer(t) }  // when called directly, not by the timer
        wakeTimer = nil
        guard !stopped else { return }
        let now = Self.now()
        perform(responder.tick(now: now))
        for i in browsers.indices { perform(browsers[i].browser.tick(now: now), browser: i) }
        rearm()
    }
}

public enum MDNSDaemonError: Error, CustomStringConvertible {
    case noSockets(String)
    public var description: String {
        switch self { case .noSockets(let why): "mDNS: cannot open a socket on port 5353 for IPv4 or IPv6: \(why)" }
    }
}

extension IPAddress {
    /// ff02::fb, the mDNS IPv6 group.
    static let mdnsV6Group: [UInt8] = [0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFB]
}
