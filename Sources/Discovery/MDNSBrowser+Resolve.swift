// What the browser keeps, asks for and reports: only the type's PTRs, the SRV and TXT of the
// instances they name, and the addresses of the hosts those SRVs name; direct questions for what
// is missing (RFC 6763 §12 makes additional records optional); found/updated/lost per instance.

extension MDNSBrowser {
    /// Caches the records of a response that belong to the browsed type: PTRs first, so an
    /// instance's SRV and TXT in the same packet count, then SRV/TXT, then addresses. Returns the
    /// instances whose records changed. The work is a few lookups per record.
    mutating func store(_ records: [DNSResourceRecord], on interface: InterfaceID, now: Int64) -> Set<DNSName> {
        var flushed: Set<RecordSetKey> = []
        var dirty: Set<DNSName> = []
        var used = 0
        let type = configuration.serviceType
        func insert(_ record: DNSResourceRecord) -> Bool {
            used += 1
            switch cache.insert(record, on: interface, now: now, jitter: jitter.millis(0...20), flushed: &flushed) {
            case .added: counters.recordsCached += 1
            case .goodbye: counters.goodbyesReceived += 1
            case .full: counters.cacheFull += 1; return false
            case .refreshed: break
            case .ignored: return false
            }
            return true
        }
        for record in records where record.recordClass == DNSClass.internet && record.type == .ptr && record.name == type {
            guard case let .ptr(instance) = record.data, instance.parent == type, insert(record) else { continue }
            dirty.insert(instance)
        }
        for record in records where record.recordClass == DNSClass.internet && (record.type == .srv || record.type == .txt) {
            guard isListed(record.name, now: now), insert(record) else { continue }
            dirty.insert(record.name)
            if case let .srv(_, _, _, target) = record.data, record.ttl > 0 { instancesByHost[target, default: []].insert(record.name) }
        }
        for record in records where record.recordClass == DNSClass.internet && (record.type == .a || record.type == .aaaa) {
            guard let instances = instancesByHost[record.name], insert(record) else { continue }
            dirty.formUnion(instances)
        }
        counters.recordsIgnored += records.count - used
        return dirty
    }

    /// True while some interface lists the instance under the browsed type.
    func isListed(_ instance: DNSName, now: Int64) -> Bool {
        schedules.keys.contains { cache.holds(RecordSetKey(interface: $0, name: configuration.serviceType, type: .ptr), .ptr(instance), now: now) }
    }

    /// Drops removed records from the host index; returns the instances they touched.
    mutating func forget(_ removed: [DNSResourceRecord], now: Int64) -> Set<DNSName> {
        var dirty: Set<DNSName> = []
        for record in removed {
            switch record.data {
            case let .ptr(instance): dirty.insert(instance)
            case let .srv(_, _, _, target):
                dirty.insert(record.name)
                let stillNamed = schedules.keys.contains { interface in
                    cache.live(RecordSetKey(interface: interface, name: record.name, type: .srv), now: now).contains {
                        if case let .srv(_, _, _, other) = $0.data { other == target } else { false }
                    }
                }
                if !stillNamed {
                    instancesByHost[target]?.remove(record.name)
                    if instancesByHost[target]?.isEmpty == true { instancesByHost[target] = nil }
                }
            case .a, .aaaa: dirty.formUnion(instancesByHost[record.name] ?? [])
            default: dirty.insert(record.name)
            }
        }
        return dirty
    }

    /// True while a cached set still matters: the type's PTRs, a listed instance's SRV and TXT,
    /// and the addresses of a host an SRV names.
    func isRelevant(_ key: RecordSetKey, now: Int64) -> Bool {
        key.name == configuration.serviceType || isListed(key.name, now: now) || instancesByHost[key.name] != nil
    }

    /// The instance as the cache now describes it: nil until it has SRV, TXT and an address.
    func resolvedView(of instance: DNSName, now: Int64) -> DiscoveredService? {
        var srv: (port: UInt16, target: DNSName, at: Int64)?
        var txt: (TXTRecord, Int64)?
        var addresses: [InterfaceID: [IPAddress]] = [:]
        let type = configuration.serviceType
        for interface in schedules.keys {
            guard cache.holds(RecordSetKey(interface: interface, name: type, type: .ptr), .ptr(instance), now: now) else { continue }
            for entry in cache.entries(RecordSetKey(interface: interface, name: instance, type: .srv)) where entry.expiresAt > now {
                if case let .srv(_, _, port, target) = entry.record.data, entry.receivedAt >= (srv?.at ?? .min) {
                    srv = (port, target, entry.receivedAt)
                }
            }
            for entry in cache.entries(RecordSetKey(interface: interface, name: instance, type: .txt)) where entry.expiresAt > now {
                if case let .txt(strings) = entry.record.data, entry.receivedAt >= (txt?.1 ?? .min) {
                    txt = (TXTRecord(strings: strings), entry.receivedAt)
                }
            }
        }
        guard let srv, let txt else { return nil }
        for interface in schedules.keys {
            var found: [IPAddress] = []
            for family in [DNSRecordType.a, .aaaa] {
                for record in cache.live(RecordSetKey(interface: interface, name: srv.target, type: family), now: now) {
                    if case let .a(address) = record.data { found.append(address) }
                    if case let .aaaa(address) = record.data { found.append(address) }
                }
            }
            if !found.isEmpty { addresses[interface] = found.sorted() }
        }
        guard !addresses.isEmpty else { return nil }
        return DiscoveredService(name: instance, host: srv.target, port: srv.port, txt: txt.0, addresses: addresses)
    }

    /// Compares the changed instances with what was last reported and emits the differences (in
    /// name order, so runs repeat exactly).
    mutating func report(_ changed: Set<DNSName>, now: Int64) {
        var events: [(DNSName, MDNSBrowserEvent)] = []
        for name in changed {
            let view = resolvedView(of: name, now: now)
            switch (services[name], view) {
            case (nil, let view?): events.append((name, .found(view)))
            case (let old?, let view?) where old != view: events.append((name, .updated(view)))
            case (_?, nil): events.append((name, .lost(name)))
            default: break
            }
            services[name] = view
        }
        events.sort { $0.0 < $1.0 }
        output += events.map { .event($0.1) }
    }

    /// For each interface's instance missing its SRV, TXT or an address: ask soon (20–120 ms, so
    /// answers split over packets can arrive), then with backoff while it stays missing.
    mutating func scheduleResolves(_ changed: Set<DNSName>, now: Int64) {
        for instance in changed.sorted() {
            for interface in schedules.keys.sorted() {
                let key = ResolveKey(interface: interface, instance: instance)
                guard cache.holds(RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr), .ptr(instance), now: now) else {
                    resolving[key] = nil
                    continue
                }
                let missing = missingQuestions(key, now: now)
                if missing.isEmpty {
                    resolving[key] = nil
                } else if resolving[key]?.missing != missing {
                    // Something new is missing (the SRV came, naming a host we have no address of).
                    resolving[key] = ResolveSchedule(next: now + jitter.millis(20...120), interval: 1000, missing: missing)
                }
            }
        }
    }

    func missingQuestions(_ key: ResolveKey, now: Int64) -> [DNSQuestion] {
        var questions: [DNSQuestion] = []
        let srv = cache.live(RecordSetKey(interface: key.interface, name: key.instance, type: .srv), now: now)
        if srv.isEmpty { questions.append(DNSQuestion(name: key.instance, type: .srv)) }
        if cache.live(RecordSetKey(interface: key.interface, name: key.instance, type: .txt), now: now).isEmpty {
            questions.append(DNSQuestion(name: key.instance, type: .txt))
        }
        if case let .srv(_, _, _, target)? = srv.first?.data,
           cache.live(RecordSetKey(interface: key.interface, name: target, type: .a), now: now).isEmpty,
           cache.live(RecordSetKey(interface: key.interface, name: target, type: .aaaa), now: now).isEmpty {
            questions += [DNSQuestion(name: target, type: .a), DNSQuestion(name: target, type: .aaaa)]
        }
        return questions
    }

    /// The resolve questions due on an interface; each asked instance backs off (1 s doubling to
    /// a minute), and one that stopped missing anything or lost its PTR is dropped.
    mutating func resolveQuestions(on interface: InterfaceID, now: Int64) -> [DNSQuestion] {
        var questions: [DNSQuestion] = []
        for (key, schedule) in resolving where key.interface == interface && schedule.next <= now {
            let missing = missingQuestions(key, now: now)
            let stillListed = cache.holds(RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr), .ptr(key.instance), now: now)
            guard stillListed, !missing.isEmpty else {
                resolving[key] = nil
                continue
            }
            questions += missing.filter { !questions.contains($0) }
            resolving[key] = ResolveSchedule(next: now + schedule.interval, interval: min(schedule.interval * 2, 60_000), missing: missing)
            counters.resolveQueries += 1
        }
        return questions
    }
}
