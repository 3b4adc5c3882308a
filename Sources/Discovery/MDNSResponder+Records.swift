// The responder's names and records: the host's A/AAAA per interface, each service's SRV, TXT and
// PTRs, the NSEC that says which types a name has (RFC 6762 §6.1), and the next name after a
// conflict (§9: `name (2)`, `host-2`).

/// One name the responder owns and probes: the host name or a service instance name.
struct Entity: Sendable {
    var name: DNSName
    var phases: [InterfaceID: Phase] = [:]
    /// Interfaces where at least one announcement went out under the current name: where a
    /// goodbye is owed.
    var announcedOn: Set<InterfaceID> = []
    /// The name last reported established (so a name is reported once).
    var reportedName: DNSName?
}

enum Phase: Equatable, Sendable {
    /// `sent` probes out; the next step at `next` (after the third: probing succeeded).
    case probing(sent: Int, next: Int64)
    case announcing(sent: Int, next: Int64)
    case established

    var due: Int64? {
        switch self {
        case let .probing(_, next), let .announcing(_, next): next
        case .established: nil
        }
    }

    var isProbing: Bool { if case .probing = self { true } else { false } }
}

enum EntityID: Hashable, Sendable {
    case host
    case service(MDNSServiceID)
}

extension MDNSResponder {
    /// The service type enumeration name (RFC 6763 §9).
    static let servicesName = DNSName(unchecked: ["_services", "_dns-sd", "_udp", "local"].map { Array($0.utf8) })

    var entityIDs: [EntityID] { [.host] + services.keys.sorted().map { .service($0) } }

    func entity(_ id: EntityID) -> Entity {
        switch id {
        case .host: host
        case let .service(service): services[service]?.entity ?? Entity(name: .root)
        }
    }

    mutating func updateEntity(_ id: EntityID, _ change: (inout Entity) -> Void) {
        switch id {
        case .host: change(&host)
        case let .service(service):
            guard var entry = services[service] else { return }
            change(&entry.entity)
            services[service] = entry
        }
    }

    func hostAddressRecords(_ addresses: [IPAddress]) -> [DNSResourceRecord] {
        addresses.map { address in
            DNSResourceRecord(name: host.name, data: address.isIPv4 ? .a(address) : .aaaa(address),
                              ttl: configuration.hostTTL, cacheFlush: true)
        }
    }

    /// The unique records of a name on an interface: what its probes propose (§8.1).
    func uniqueRecords(of id: EntityID, on interface: InterfaceID) -> [DNSResourceRecord] {
        switch id {
        case .host:
            return hostAddressRecords(interfaces[interface] ?? [])
        case let .service(serviceID):
            guard let entry = services[serviceID] else { return [] }
            let name = entry.entity.name
            return [
                DNSResourceRecord(name: name, data: .srv(priority: 0, weight: 0, port: entry.service.port, target: host.name),
                                  ttl: configuration.hostTTL, cacheFlush: true),
                DNSResourceRecord(name: name, data: .txt(entry.service.txt), ttl: configuration.otherTTL, cacheFlush: true),
            ]
        }
    }

    /// Every record of a name on an interface: the unique ones and, for a service, its shared PTRs
    /// (type → instance, and the type enumeration's `_services._dns-sd._udp` → type).
    func records(of id: EntityID, on interface: InterfaceID) -> [DNSResourceRecord] {
        var records = uniqueRecords(of: id, on: interface)
        if case let .service(serviceID) = id, let entry = services[serviceID] {
            let type = entry.service.serviceType
            records.append(DNSResourceRecord(name: type, data: .ptr(entry.entity.name), ttl: configuration.otherTTL))
            records.append(DNSResourceRecord(name: Self.servicesName, data: .ptr(type), ttl: configuration.otherTTL))
        }
        return records
    }

    /// The NSEC saying which types the name has on this interface (§6.1): the negative answer
    /// for every other type.
    func nsecRecord(of id: EntityID, on interface: InterfaceID) -> DNSResourceRecord {
        let name = entity(id).name
        let types = Set(uniqueRecords(of: id, on: interface).map(\.type)).sorted()
        let ttl = id == .host ? configuration.hostTTL : configuration.otherTTL
        return DNSResourceRecord(name: name, data: .nsec(next: name, types: types), ttl: ttl, cacheFlush: true)
    }

    /// The names that may answer on an interface: probing done (announcing or established).
    func answeringEntities(on interface: InterfaceID) -> [EntityID] {
        entityIDs.filter { id in entity(id).phases[interface].map { !$0.isProbing } ?? false }
    }

    /// True when `record` is one this responder advertises for the name on any interface: its own
    /// packets, looped back or heard on a second interface on the same link, are no conflict.
    func isOwnRecord(_ record: DNSResourceRecord, of id: EntityID) -> Bool {
        interfaces.keys.contains { interface in
            records(of: id, on: interface).contains { $0.isSameRecord(as: record) }
                || nsecRecord(of: id, on: interface).isSameRecord(as: record)
        }
    }

    /// `name` → `name (2)`, `name (2)` → `name (3)`, shortened to fit 63 bytes (RFC 6763 §4.1.1).
    static func nextInstanceName(after name: String) -> String {
        var base = name
        var number = 2
        if name.hasSuffix(")"), let open = name.lastIndex(of: "("), open > name.startIndex,
           name[name.index(before: open)] == " ", let n = Int(name[name.index(after: open)..<name.index(before: name.endIndex)]), n >= 2 {
            base = String(name[..<name.index(before: open)])
            number = n + 1
        }
        return truncated(base, toFit: " (\(number))")
    }

    /// `host` → `host-2`, `host-2` → `host-3` (the form mdns-sd and avahi use).
    static func nextHostName(after name: String) -> String {
        var base = name
        var number = 2
        if let dash = name.lastIndex(of: "-"), let n = Int(name[name.index(after: dash)...]), n >= 2, dash > name.startIndex {
            base = String(name[..<dash])
            number = n + 1
        }
        return truncated(base, toFit: "-\(number)")
    }

    /// `base + suffix`, dropping whole characters from `base` until it fits in one label.
    static func truncated(_ base: String, toFit suffix: String) -> String {
        var base = base
        while base.utf8.count + suffix.utf8.count > DNSName.maxLabelLength, !base.isEmpty { base.removeLast() }
        return base + suffix
    }
}
