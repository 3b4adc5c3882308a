// What the browser keeps, asks for and reports: only the type's PTRs, the SRV and TXT of the
// instances they name, and the addresses of the hosts those SRVs name; direct questions for what
// is missing (RFC 6763 §12 makes additional records optional); found/updated/lost per instance.

extension MDNSBrowser {
    /// Caches the records of a response that belong to the browsed type: PTRs first, so an
    /// instance's SRV and TXT in the same packet count, then SRV/TXT, then addresses.
    mutating func store(_ records: [DNSResourceRecord], on interface: InterfaceID, now: Int64) {
        var flushed: Set<RecordSetKey> = []
        let type = configuration.serviceType
        var instances = knownInstances(now: now)
        var hosts: Set<DNSName> = []
        func insert(_ record: DNSResourceRecord) {
            switch cache.insert(record, on: interface, now: now, jitter: jitter.millis(0...20), flushed: &flushed) {
            case .added: counters.recordsCached += 1
            case .goodbye: counters.goodbyesReceived += 1
            case .full: counters.cacheFull += 1
            case .refreshed, .ignored: break
            }
        }
        var used = 0
        for record in records where record.recordClass == DNSClass.internet && record.type == .ptr && record.name == type {
            guard case let .ptr(instance) = record.data, instance.parent == type else { continue }
            used += 1
            insert(record)
            if record.ttl > 0 { instances.insert(instance) }
        }
        for record in records where record.recordClass == DNSClass.internet && (record.type == .srv || record.type == .txt) {
            guard instances.contains(record.name) else { continue }
            used += 1
            insert(record)
        }
        for instance in instances {
            for record in cache.live(RecordSetKey(interface: interface, name: instance, type: .srv), now: now) {
                if case let .srv(_, _, _, target) = record.data { hosts.insert(target) }
            }
        }
        for record in records where record.recordClass == DNSClass.internet && (record.type == .a || record.type == .aaaa) {
            guard hosts.contains(record.name) else { continue }
            used += 1
            insert(record)
        }
        counters.recordsIgnored += records.count - used
    }

    /// Instances with a live PTR on any interface.
    func knownInstances(now: Int64) -> Set<DNSName> {
        var instances: Set<DNSName> = []
        for interface in schedules.keys {
            for record in cache.live(RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr), now: now) {
                if case let .ptr(instance) = record.data { instances.insert(instance) }
            }
        }
        return instances
    }

    /// True while a cached set still matters: the type's PTRs, and the records of a live instance
    /// or of its host.
    func isRelevant(_ key: RecordSetKey, instances: Set<DNSName>, hosts: Set<DNSName>) -> Bool {
        key.name == configuration.serviceType || instances.contains(key.name) || hosts.contains(key.name)
    }

    /// The instance as the cache now describes it: nil until it has SRV, TXT and an address.
    func resolvedView(of instance: DNSName, now: Int64) -> DiscoveredService? {
        var srv: (port: UInt16, target: DNSName, at: Int64)?
        var txt: (TXTRecord, Int64)?
        var addresses: [InterfaceID: [IPAddress]] = [:]
        let type = configuration.serviceType
        for interface in schedules.keys {
            let ptrs = cache.live(RecordSetKey(interface: interface, name: type, type: .ptr), now: now)
            guard ptrs.contains(where: { $0.data == .ptr(instance) }) else { continue }
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

    /// Compares every instance with what was last reported and emits the differences.
    mutating func report(now: Int64) {
        let names = knownInstances(now: now).union(services.keys)
        for name in names.sorted(by: { $0.description < $1.description }) {
            let view = resolvedView(of: name, now: now)
            switch (services[name], view) {
            case (nil, let view?): output.append(.event(.found(view)))
            case (let old?, let view?) where old != view: output.append(.event(.updated(view)))
            case (_?, nil): output.append(.event(.lost(name)))
            default: break
            }
            services[name] = view
        }
    }

    /// For each interface's instance missing its SRV, TXT or an address: ask soon (20–120 ms, so
    /// answers split over packets can arrive), then with backoff while it stays missing.
    mutating func scheduleResolves(now: Int64) {
        for interface in schedules.keys {
            for record in cache.live(RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr), now: now) {
                guard case let .ptr(instance) = record.data else { continue }
                let key = ResolveKey(interface: interface, instance: instance)
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
            let stillListed = cache.live(RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr), now: now)
                .contains { $0.data == .ptr(key.instance) }
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
