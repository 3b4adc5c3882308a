// Probing, announcing, conflicts and goodbyes (RFC 6762 §8, §9, §10.1).

extension MDNSResponder {
    static let probeCount = 3
    static let probeInterval: Int64 = 250

    /// Sends the probes and announcements due on `interface`, all names in one packet each.
    mutating func runProbesAndAnnouncements(on interface: InterfaceID, now: Int64) {
        var probing: [EntityID] = [], firstProbe: Set<EntityID> = [], announcing: [EntityID] = []
        let announcements = configuration.announcements
        for id in entityIDs {
            guard let phase = entity(id).phases[interface], let due = phase.due, due <= now else { continue }
            switch phase {
            case let .probing(sent, _) where sent < Self.probeCount:
                probing.append(id)
                if sent == 0 { firstProbe.insert(id) }
                updateEntity(id) { $0.phases[interface] = .probing(sent: sent + 1, next: now + Self.probeInterval) }
            case .probing:
                // 250 ms after the third probe with no conflict: the name is ours (§8.1).
                announcing.append(id)
                reportEstablished(id)
                updateEntity(id) { $0.phases[interface] = .announcing(sent: 1, next: now + 1000) }
            case let .announcing(sent, _):
                announcing.append(id)
                updateEntity(id) {
                    $0.phases[interface] = sent + 1 >= announcements ? .established : .announcing(sent: sent + 1, next: now + 1000)
                }
            case .established:
                break
            }
        }
        if !probing.isEmpty { sendProbe(probing, firstProbe: firstProbe, on: interface) }
        if !announcing.isEmpty { sendAnnouncement(announcing, on: interface, now: now) }
    }

    /// §8.1: a query for each name (type ANY, the first probe QU) with the proposed records in
    /// the authority section.
    mutating func sendProbe(_ ids: [EntityID], firstProbe: Set<EntityID>, on interface: InterfaceID) {
        let questions = ids.map { DNSQuestion(name: entity($0).name, type: .any, unicastResponse: firstProbe.contains($0)) }
        let authorities = ids.flatMap { uniqueRecords(of: $0, on: interface) }.map { record in
            var proposed = record
            proposed.cacheFlush = false
            return proposed
        }
        send(PacketPacker.pack(header: .query(), questions: questions, authorities: authorities, limit: configuration.packetLimit),
             on: interface, to: .multicast)
        counters.probesSent += 1
    }

    /// §8.3: every record of the names, unique ones with cache-flush, addresses alongside.
    mutating func sendAnnouncement(_ ids: [EntityID], on interface: InterfaceID, now: Int64) {
        var answers: [DNSResourceRecord] = []
        for id in ids {
            answers += records(of: id, on: interface)
            updateEntity(id) { _ = $0.announcedOn.insert(interface) }
        }
        var additionals: [DNSResourceRecord] = []
        if !ids.contains(.host), answeringEntities(on: interface).contains(.host) {
            additionals = uniqueRecords(of: .host, on: interface)
        }
        send(PacketPacker.pack(header: .response(), answers: answers, additionals: additionals, limit: configuration.packetLimit),
             on: interface, to: .multicast)
        noteMulticast(answers + additionals, on: interface, now: now)
        counters.announcementsSent += 1
    }

    mutating func reportEstablished(_ id: EntityID) {
        let name = entity(id).name
        guard entity(id).reportedName != name else { return }
        updateEntity(id) { $0.reportedName = name }
        switch id {
        case .host: output.append(.event(.hostNameEstablished(name)))
        case let .service(service): output.append(.event(.serviceEstablished(service, name)))
        }
    }

    /// §8.2: another host probes a name we are probing. Both compare their proposed records
    /// (sorted by class, type, rdata bytes); the lexicographically earlier set loses, waits 1 s
    /// and probes again (then meets the winner's answer and renames).
    mutating func breakProbeTies(_ message: DNSMessage, on interface: InterfaceID, now: Int64) {
        for id in entityIDs {
            guard entity(id).phases[interface]?.isProbing == true else { continue }
            let name = entity(id).name
            let theirs = message.authorities.filter { $0.name == name }
            guard !theirs.isEmpty, !theirs.allSatisfy({ isOwnRecord($0, of: id) }) else { continue }
            let ours = uniqueRecords(of: id, on: interface)
            if Self.tieBreakOrder(ours, theirs) < 0 {
                counters.probeTiebreaksLost += 1
                updateEntity(id) { $0.phases[interface] = .probing(sent: 0, next: now + 1000) }
            }
        }
    }

    /// -1, 0 or 1 as `a` sorts before, with, or after `b` (§8.2).
    static func tieBreakOrder(_ a: [DNSResourceRecord], _ b: [DNSResourceRecord]) -> Int {
        func keyed(_ records: [DNSResourceRecord]) -> [[UInt8]] {
            records.map { r in [UInt8(r.recordClass >> 8), UInt8(r.recordClass & 0xFF), UInt8(r.type.rawValue >> 8), UInt8(r.type.rawValue & 0xFF)] + r.data.uncompressedBytes }
                .sorted { $0.lexicographicallyPrecedes($1) }
        }
        let left = keyed(a), right = keyed(b)
        for (x, y) in zip(left, right) where x != y { return x.lexicographicallyPrecedes(y) ? -1 : 1 }
        return left.count == right.count ? 0 : (left.count < right.count ? -1 : 1)
    }

    /// A response names one of our names with data that is not ours: while probing that is a
    /// conflict (§8.1: rename); once established, a record of one of our unique types with other
    /// rdata sends the name back to probing (§9), where the other host's answer decides.
    mutating func detectConflicts(_ message: DNSMessage, on interface: InterfaceID, now: Int64) {
        for id in entityIDs {
            let owner = entity(id)
            guard let phase = owner.phases[interface] else { continue }
            let foreign = (message.answers + message.additionals + message.authorities).filter {
                $0.name == owner.name && $0.ttl > 0 && !isOwnRecord($0, of: id)
            }
            guard !foreign.isEmpty else { continue }
            if phase.isProbing {
                counters.conflicts += 1
                rename(id, now: now)
            } else {
                let ownTypes = Set(uniqueRecords(of: id, on: interface).map(\.type))
                guard foreign.contains(where: { ownTypes.contains($0.type) }) else { continue }
                counters.conflicts += 1
                restartProbing(id, now: now)
            }
        }
    }

    mutating func restartProbing(_ id: EntityID, now: Int64) {
        conflictTimes = conflictTimes.filter { now - $0 < 10_000 } + [now]
        // §8.1: after 15 conflicts within 10 s, wait 5 s before probing again.
        let delay = conflictTimes.count >= 15 ? 5000 : jitter.millis(0...250)
        let all = Array(interfaces.keys)
        updateEntity(id) { entity in for interface in all { entity.phases[interface] = .probing(sent: 0, next: now + delay) } }
    }

    /// Takes the next name, with goodbyes for what was announced under the old one, and probes it.
    mutating func rename(_ id: EntityID, now: Int64) {
        // The service type stays (under the new name): its enumeration PTR gets no goodbye.
        for interface in entity(id).announcedOn.sorted() { sendGoodbyes(for: id, on: interface, keepingType: true, now: now) }
        updateEntity(id) { $0.announcedOn = [] }
        let old = entity(id).name
        forgetMulticastHistory(of: old)
        switch id {
        case .host:
            // The label fits in 63 bytes and the parent is `local`: the new name is valid.
            host.name = (try? old.parent.prepending(Self.nextHostName(after: old.firstLabel))) ?? old
            output.append(.event(.hostRenamed(from: old, to: host.name)))
            // Every SRV names the host: each service announces its new target.
            for service in services.keys {
                for (interface, phase) in services[service]?.entity.phases ?? [:] where !phase.isProbing {
                    services[service]?.entity.phases[interface] = .announcing(sent: 0, next: now)
                }
            }
        case let .service(service):
            var label = old.firstLabel
            var name = old
            repeat {
                label = Self.nextInstanceName(after: label)
                name = (try? old.parent.prepending(label)) ?? old
            } while services.values.contains(where: { $0.entity.name == name })
            services[service]?.entity.name = name
            output.append(.event(.serviceRenamed(service, from: old, to: name)))
        }
        counters.renames += 1
        restartProbing(id, now: now)
    }

    mutating func sendGoodbyes(for id: EntityID, on interface: InterfaceID, keepingType: Bool = false, now: Int64) {
        var goodbyes = records(of: id, on: interface)
        if case let .service(serviceID) = id, let type = services[serviceID]?.service.serviceType {
            // The type enumeration PTR stays while another service of the type remains.
            let others = services.filter { $0.key != serviceID && $0.value.service.serviceType == type && $0.value.entity.announcedOn.contains(interface) }
            if keepingType || !others.isEmpty { goodbyes.removeAll { $0.name == Self.servicesName } }
        }
        sendGoodbyes(goodbyes, on: interface, now: now)
    }

    /// Drops the send times of a name's records (and of PTRs to it): names a hostile peer makes
    /// us give up must not pile up.
    mutating func forgetMulticastHistory(of name: DNSName) {
        for interface in lastMulticast.keys {
            lastMulticast[interface] = lastMulticast[interface]?.filter { $0.key.name != name && $0.key.data != .ptr(name) }
        }
    }

    /// §10.1: the records with TTL 0.
    mutating func sendGoodbyes(_ records: [DNSResourceRecord], on interface: InterfaceID, now: Int64) {
        guard !records.isEmpty else { return }
        let goodbyes = records.map { $0.with(ttl: 0) }
        send(PacketPacker.pack(header: .response(), answers: goodbyes, limit: configuration.packetLimit), on: interface, to: .multicast)
        noteMulticast(goodbyes, on: interface, now: now)
        counters.goodbyeRecordsSent += goodbyes.count
    }
}
