// The sans-I/O mDNS responder (RFC 6762) for DNS-SD services (RFC 6763): one host name and any
// number of service instances, on any number of interfaces.
//
//     setInterface / removeInterface ─┐                    ┌─► .send(OutgoingPacket)
//     register / unregister / shutdown ┼─► MDNSResponder ───┤
//     receive(packet) / tick ─────────┘   (value, no I/O)  └─► .event(registered | renamed)
//
// Every step takes `now` (milliseconds, any monotonic clock) and returns what to send; after every
// step the caller arms its timer for `nextWakeup`. Random delays come from the injected
// `JitterSource`. Each name (the host's, each instance's) is probed and announced per interface
// (MDNSResponder+Probing.swift); queries are answered from the records of the interface the query
// arrived on (MDNSResponder+Answering.swift); the records themselves are built in
// MDNSResponder+Records.swift.

public struct MDNSServiceID: Hashable, Comparable, Sendable {
    let value: Int
    public static func < (lhs: MDNSServiceID, rhs: MDNSServiceID) -> Bool { lhs.value < rhs.value }
}

/// A service instance to advertise: `instanceName.serviceType` with SRV → this host:port and TXT.
public struct MDNSService: Hashable, Sendable {
    /// UTF-8, 1…63 bytes, any characters (RFC 6763 §4.1.1).
    public var instanceName: String
    /// For example `_bigpeer._tcp.local.`
    public var serviceType: DNSName
    public var port: UInt16
    public var txt: TXTRecord

    public init(instanceName: String, serviceType: DNSName, port: UInt16, txt: TXTRecord = TXTRecord()) {
        self.instanceName = instanceName
        self.serviceType = serviceType
        self.port = port
        self.txt = txt
    }
}

public struct MDNSResponderConfiguration: Sendable {
    /// The host's label: records live at `hostName.local.`
    public var hostName: String
    /// TTL of records tied to the host: A, AAAA, SRV, NSEC (RFC 6762 §10).
    public var hostTTL: UInt32 = 120
    /// TTL of other records: PTR, TXT.
    public var otherTTL: UInt32 = 4500
    /// Announcements after probing, 1 s apart (§8.3: at least 2).
    public var announcements = 2
    /// Largest datagram sent.
    public var packetLimit = PacketPacker.defaultLimit

    public init(hostName: String) { self.hostName = hostName }
}

public enum MDNSResponderEvent: Hashable, Sendable {
    /// Probing for the host name finished on an interface for the first time under this name.
    case hostNameEstablished(DNSName)
    /// Probing for a service's name finished for the first time under this name.
    case serviceEstablished(MDNSServiceID, DNSName)
    /// A conflict made the host take a new name (`host-2`, RFC 6762 §9).
    case hostRenamed(from: DNSName, to: DNSName)
    /// A conflict made a service take a new instance name (`name (2)`).
    case serviceRenamed(MDNSServiceID, from: DNSName, to: DNSName)
}

public enum MDNSResponderAction: Hashable, Sendable {
    case send(OutgoingPacket)
    case event(MDNSResponderEvent)
}

public enum MDNSResponderError: Error, Equatable, Sendable {
    /// The instance name is empty, longer than 63 bytes, or makes the full name exceed 255 bytes.
    case badInstanceName(String)
    case badHostName(String)
    /// This responder already advertises that instance name.
    case duplicateInstanceName(DNSName)
}

/// What the responder did, for metrics and tests (python-zeroconf and mdns-sd keep the same).
public struct MDNSResponderCounters: Equatable, Sendable {
    public var probesSent = 0
    public var probeTiebreaksLost = 0
    public var conflicts = 0
    public var renames = 0
    public var announcementsSent = 0
    public var multicastResponses = 0
    public var unicastResponses = 0
    public var legacyReplies = 0
    public var knownAnswerSuppressions = 0
    public var duplicateAnswerSuppressions = 0
    public var negativeAnswers = 0
    public var goodbyeRecordsSent = 0
    public var malformedPackets = 0
    public var packetsSent: [InterfaceID: Int] = [:]
}

public struct MDNSResponder: Sendable {
    public let configuration: MDNSResponderConfiguration
    public internal(set) var counters = MDNSResponderCounters()
    var jitter: JitterSource

    var host: Entity
    var services: [MDNSServiceID: ServiceEntry] = [:]
    var nextServiceID = 1
    /// Each interface's addresses: the only ones its answers carry (§6.2, §14).
    var interfaces: [InterfaceID: [IPAddress]] = [:]
    var pending: [InterfaceID: PendingResponse] = [:]
    /// When each record (TTL 0, no cache-flush bit) was last multicast on each interface (§6: at
    /// most once a second; §5.4: a QU question is answered by multicast after a quarter TTL).
    var lastMulticast: [InterfaceID: [DNSResourceRecord: Int64]] = [:]
    /// Recent conflicts: after 15 in 10 s, wait 5 s before probing again (§8.1).
    var conflictTimes: [Int64] = []
    var isShutDown = false
    var output: [MDNSResponderAction] = []

    struct ServiceEntry: Sendable {
        var service: MDNSService
        var entity: Entity
    }

    public init(configuration: MDNSResponderConfiguration, jitter: JitterSource = JitterSource()) throws(MDNSResponderError) {
        self.configuration = configuration
        self.jitter = jitter
        guard let name = try? DNSName(labels: [Array(configuration.hostName.utf8), Array("local".utf8)]) else {
            throw .badHostName(configuration.hostName)
        }
        host = Entity(name: name)
    }

    public var hostName: DNSName { host.name }

    /// The current full name of a service (changes on renames), nil when not registered.
    public func name(of service: MDNSServiceID) -> DNSName? { services[service]?.entity.name }

    /// The earliest time `tick` has work to do.
    public var nextWakeup: Int64? {
        var times = pending.values.map(\.due)
        for id in entityIDs { times += entity(id).phases.values.compactMap(\.due) }
        return times.min()
    }

    /// Adds the service; probing starts on every interface after a random 0–250 ms (§8.1).
    public mutating func register(_ service: MDNSService, now: Int64) throws(MDNSResponderError) -> MDNSServiceID {
        guard !service.instanceName.isEmpty, let name = try? service.serviceType.prepending(service.instanceName),
              service.instanceName.utf8.count <= DNSName.maxLabelLength
        else { throw .badInstanceName(service.instanceName) }
        if services.values.contains(where: { $0.entity.name == name }) { throw .duplicateInstanceName(name) }
        let id = MDNSServiceID(value: nextServiceID)
        nextServiceID += 1
        var entity = Entity(name: name)
        if !isShutDown {
            for interface in interfaces.keys.sorted() { entity.phases[interface] = .probing(sent: 0, next: now + jitter.millis(0...250)) }
        }
        services[id] = ServiceEntry(service: service, entity: entity)
        return id
    }

    /// Removes the service, with goodbyes (TTL 0) on every interface it was announced on (§10.1).
    public mutating func unregister(_ id: MDNSServiceID, now: Int64) -> [MDNSResponderAction] {
        guard let entry = services[id] else { return [] }
        for interface in entry.entity.announcedOn.sorted() { sendGoodbyes(for: .service(id), on: interface, now: now) }
        services[id] = nil
        forgetMulticastHistory(of: entry.entity.name)
        return drainOutput()
    }

    /// Adds an interface or changes its addresses. A new interface probes every name; on an
    /// address change the removed addresses get goodbyes, the host name is probed again and the
    /// services are announced again (§8.4).
    public mutating func setInterface(_ interface: InterfaceID, addresses: [IPAddress], now: Int64) -> [MDNSResponderAction] {
        let unique = Array(Set(addresses)).sorted()
        guard !isShutDown, interfaces[interface] != unique else { return [] }
        let old = interfaces[interface]
        if let old, host.announcedOn.contains(interface) {
            let gone = hostAddressRecords(Array(Set(old).subtracting(unique)).sorted())
            sendGoodbyes(gone, on: interface, now: now)
        }
        interfaces[interface] = unique
        let probe = Phase.probing(sent: 0, next: now + jitter.millis(0...250))
        host.phases[interface] = probe
        for id in services.keys {
            services[id]?.entity.phases[interface] = old == nil ? probe : .announcing(sent: 0, next: now)
        }
        return drainOutput()
    }

    /// Forgets an interface after goodbyes for everything announced on it (sent only if its
    /// socket still works).
    public mutating func removeInterface(_ interface: InterfaceID, now: Int64) -> [MDNSResponderAction] {
        guard interfaces[interface] != nil else { return [] }
        for id in entityIDs where entity(id).announcedOn.contains(interface) { sendGoodbyes(for: id, on: interface, now: now) }
        interfaces[interface] = nil
        pending[interface] = nil
        lastMulticast[interface] = nil
        for id in entityIDs {
            updateEntity(id) { entity in
                entity.phases[interface] = nil
                entity.announcedOn.remove(interface)
            }
        }
        return drainOutput()
    }

    /// Goodbyes for every record on every interface; afterwards the responder stays silent.
    public mutating func shutdown(now: Int64) -> [MDNSResponderAction] {
        guard !isShutDown else { return [] }
        for interface in interfaces.keys.sorted() {
            let goodbyes = entityIDs.filter { entity($0).announcedOn.contains(interface) }.flatMap { records(of: $0, on: interface) }
            sendGoodbyes(goodbyes, on: interface, now: now)
        }
        isShutDown = true
        pending = [:]
        for id in entityIDs { updateEntity(id) { $0.phases = [:]; $0.announcedOn = [] } }
        return drainOutput()
    }

    /// One datagram from the socket layer.
    public mutating func receive(_ packet: ReceivedPacket, now: Int64) -> [MDNSResponderAction] {
        guard !isShutDown, interfaces[packet.interface] != nil else { return [] }
        guard let message = try? DNSMessage(decoding: packet.bytes) else {
            counters.malformedPackets += 1
            return []
        }
        // §18.3, §18.11: only standard queries and responses with RCODE 0 are mDNS.
        guard message.header.opcode == 0, message.header.responseCode == 0 else { return [] }
        if message.header.isResponse {
            // §11: a response from another port is not an mDNS response (and not trusted).
            if packet.source.port == mdnsPort { handleResponse(message, on: packet.interface, now: now) }
        } else {
            handleQuery(message, packet: packet, now: now)
        }
        return drainOutput()
    }

    /// Sends what is due: probes, announcements, delayed answers.
    public mutating func tick(now: Int64) -> [MDNSResponderAction] {
        guard !isShutDown else { return [] }
        for interface in interfaces.keys.sorted() {
            runProbesAndAnnouncements(on: interface, now: now)
            flushPending(on: interface, now: now)
        }
        return drainOutput()
    }

    mutating func drainOutput() -> [MDNSResponderAction] {
        defer { output = [] }
        return output
    }

    mutating func send(_ packets: [[UInt8]], on interface: InterfaceID, to destination: OutgoingPacket.Destination) {
        for bytes in packets {
            output.append(.send(OutgoingPacket(bytes: bytes, interface: interface, destination: destination)))
            counters.packetsSent[interface, default: 0] += 1
        }
    }

    /// Notes that `records` were multicast on `interface` now.
    mutating func noteMulticast(_ records: [DNSResourceRecord], on interface: InterfaceID, now: Int64) {
        for record in records { lastMulticast[interface, default: [:]][record.normalized] = now }
    }
}

extension DNSResourceRecord {
    /// The record as a key: TTL 0, no cache-flush bit.
    var normalized: DNSResourceRecord {
        var copy = with(ttl: 0)
        copy.cacheFlush = false
        return copy
    }
}
