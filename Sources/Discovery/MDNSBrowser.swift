// The sans-I/O DNS-SD browser (RFC 6763 over RFC 6762) for one service type.
//
//     addInterface / removeInterface ─┐                   ┌─► .send(OutgoingPacket)   (queries)
//     receive(packet) / tick ─────────┴─► MDNSBrowser ────┴─► .event(found | updated | lost)
//
// It asks for the type's PTRs on every interface with backoff (§5.2: 1 s, doubling to 60 min),
// listing the PTRs it knows as known answers (§7.1) and letting another host's same question
// stand for its own (§7.3); it caches what answers hold (RecordCache: only records that belong to
// the type's instances, so other services' traffic cannot fill it, within a hard bound), refreshes
// them at 80–95 % of their TTL, asks directly for a missing SRV, TXT or address
// (MDNSBrowser+Resolve.swift), and reports each instance once it has SRV, TXT and an address.
// Steps take `now` in milliseconds; the caller arms its timer for `nextWakeup`.

public struct MDNSBrowserConfiguration: Sendable {
    /// For example `_bigpeer._tcp.local.`
    public var serviceType: DNSName
    public var cacheLimit = 10_000
    /// The longest gap between two PTR queries (§5.2: 60 minutes).
    public var maxQueryInterval: Int64 = 3_600_000
    public var packetLimit = PacketPacker.defaultLimit

    public init(serviceType: DNSName) { self.serviceType = serviceType }
}

/// A resolved instance: where to connect and what its TXT says.
public struct DiscoveredService: Hashable, Sendable {
    /// The full instance name, `Ship Node._bigpeer._tcp.local.`
    public var name: DNSName
    public var host: DNSName
    public var port: UInt16
    public var txt: TXTRecord
    /// The host's addresses as heard on each interface (link-local ones are valid only there).
    public var addresses: [InterfaceID: [IPAddress]]

    /// The instance label (`Ship Node`), UTF-8 as advertised.
    public var instanceName: String { name.firstLabel }
}

public enum MDNSBrowserEvent: Hashable, Sendable {
    case found(DiscoveredService)
    case updated(DiscoveredService)
    case lost(DNSName)
}

public enum MDNSBrowserAction: Hashable, Sendable {
    case send(OutgoingPacket)
    case event(MDNSBrowserEvent)
}

public struct MDNSBrowserCounters: Equatable, Sendable {
    public var browseQueries = 0
    /// Queries not sent because another host had just asked the same (RFC 6762 §7.3).
    public var duplicateQuestionsSuppressed = 0
    public var refreshQueries = 0
    public var resolveQueries = 0
    public var knownAnswersSent = 0
    public var recordsCached = 0
    public var goodbyesReceived = 0
    /// Records refused because the cache was full.
    public var cacheFull = 0
    /// Records that belong to no instance of the browsed type.
    public var recordsIgnored = 0
    public var malformedPackets = 0
    public var packetsSent: [InterfaceID: Int] = [:]
}

public struct MDNSBrowser: Sendable {
    public let configuration: MDNSBrowserConfiguration
    public internal(set) var counters = MDNSBrowserCounters()
    var jitter: JitterSource
    var cache: RecordCache
    /// Per interface: when the next PTR query goes, and the gap after it.
    var schedules: [InterfaceID: (next: Int64, interval: Int64)] = [:]
    /// Per interface and instance missing a record: when to ask next, the gap after that, and
    /// what was missing when it was scheduled.
    var resolving: [ResolveKey: ResolveSchedule] = [:]
    /// The instances each host name is the SRV target of (the A/AAAA records worth keeping).
    var instancesByHost: [DNSName: Set<DNSName>] = [:]
    /// What was last reported per instance.
    public internal(set) var services: [DNSName: DiscoveredService] = [:]
    var output: [MDNSBrowserAction] = []

    struct ResolveKey: Hashable, Sendable {
        var interface: InterfaceID
        var instance: DNSName
    }

    struct ResolveSchedule: Sendable {
        var next: Int64
        var interval: Int64
        var missing: [DNSQuestion]
    }

    /// The most known answers one query lists (over TC-continued packets, §7.2).
    static let maxKnownAnswers = 300

    public init(configuration: MDNSBrowserConfiguration, jitter: JitterSource = JitterSource()) {
        self.configuration = configuration
        self.jitter = jitter
        cache = RecordCache(limit: configuration.cacheLimit)
    }

    public var cachedRecordCount: Int { cache.count }

    public var nextWakeup: Int64? {
        let times = schedules.values.map { $0.next } + resolving.values.map { $0.next } + [cache.nextDue].compactMap { $0 }
        return times.min()
    }

    /// Starts browsing on an interface: the first query after 20–120 ms (§5.2).
    public mutating func addInterface(_ interface: InterfaceID, now: Int64) {
        guard schedules[interface] == nil else { return }
        schedules[interface] = (now + jitter.millis(20...120), 1000)
    }

    /// Stops browsing on an interface and forgets what it heard there.
    public mutating func removeInterface(_ interface: InterfaceID, now: Int64) -> [MDNSBrowserAction] {
        schedules[interface] = nil
        resolving = resolving.filter { $0.key.interface != interface }
        let dirty = forget(cache.removeInterface(interface), now: now)
        report(dirty, now: now)
        return drainOutput()
    }

    public mutating func receive(_ packet: ReceivedPacket, now: Int64) -> [MDNSBrowserAction] {
        guard schedules[packet.interface] != nil else { return [] }
        guard let message = try? DNSMessage(decoding: packet.bytes) else {
            counters.malformedPackets += 1
            return []
        }
        guard message.header.opcode == 0, message.header.responseCode == 0, packet.source.port == mdnsPort else { return [] }
        guard message.header.isResponse else {
            suppressDuplicateQuestion(message, on: packet.interface, now: now)
            return []
        }
        let dirty = store(message.answers + message.additionals, on: packet.interface, now: now)
        report(dirty, now: now)
        scheduleResolves(dirty, now: now)
        return drainOutput()
    }

    public mutating func tick(now: Int64) -> [MDNSBrowserAction] {
        let (expired, refreshes) = cache.advance(now: now)
        if !expired.isEmpty {
            let dirty = forget(expired, now: now)
            report(dirty, now: now)
            scheduleResolves(dirty, now: now)
        }
        for interface in schedules.keys.sorted() {
            var questions: [DNSQuestion] = []
            if let schedule = schedules[interface], schedule.next <= now {
                questions.append(DNSQuestion(name: configuration.serviceType, type: .ptr))
                schedules[interface] = (now + schedule.interval, min(schedule.interval * 2, configuration.maxQueryInterval))
                counters.browseQueries += 1
            }
            questions += resolveQuestions(on: interface, now: now)
            sendQuery(questions, on: interface, now: now)
        }
        for interface in Set(refreshes.map(\.interface)).sorted() {
            let questions = refreshes.filter { $0.interface == interface && isRelevant($0, now: now) }
                .map { DNSQuestion(name: $0.name, type: $0.type) }
            counters.refreshQueries += questions.isEmpty ? 0 : 1
            sendQuery(questions, on: interface, now: now)
        }
        return drainOutput()
    }

    /// §7.3: another host asks our PTR question (QM, so the answers are multicast) within a
    /// second of our own query, listing no known answer we would not list: its query serves as
    /// ours.
    mutating func suppressDuplicateQuestion(_ message: DNSMessage, on interface: InterfaceID, now: Int64) {
        guard let schedule = schedules[interface], schedule.next > now, schedule.next - now < 1000,
              message.questions.contains(where: { $0.name == configuration.serviceType && ($0.type == .ptr || $0.type == .any) && !$0.unicastResponse })
        else { return }
        let ours = RecordSetKey(interface: interface, name: configuration.serviceType, type: .ptr)
        let listed = message.answers.filter { $0.name == configuration.serviceType && $0.type == .ptr }
        guard listed.allSatisfy({ known in cache.entries(ours).contains { $0.isKnownAnswer(now: now) && $0.record.data == known.data } }) else { return }
        schedules[interface] = (now + schedule.interval, min(schedule.interval * 2, configuration.maxQueryInterval))
        counters.duplicateQuestionsSuppressed += 1
    }

    /// A query with the PTRs and other records it asks about that this interface still holds
    /// with more than half their TTL, as known answers (§7.1).
    mutating func sendQuery(_ questions: [DNSQuestion], on interface: InterfaceID, now: Int64) {
        guard !questions.isEmpty else { return }
        var known: [DNSResourceRecord] = []
        for question in Set(questions.map { RecordSetKey(interface: interface, name: $0.name, type: $0.type) }) {
            known += cache.entries(question).filter { $0.isKnownAnswer(now: now) }.map { entry in
                // §10.2: never the cache-flush bit in a known-answer list.
                var record = entry.record.with(ttl: UInt32(max(0, (entry.expiresAt - now) / 1000)))
                record.cacheFlush = false
                return record
            }
        }
        // A few packets' worth at most: beyond that, suppression saves less than the list costs.
        known = Array(known.prefix(Self.maxKnownAnswers))
        counters.knownAnswersSent += known.count
        for bytes in PacketPacker.pack(header: .query(), questions: questions, answers: known, limit: configuration.packetLimit) {
            output.append(.send(OutgoingPacket(bytes: bytes, interface: interface, destination: .multicast)))
            counters.packetsSent[interface, default: 0] += 1
        }
    }

    mutating func drainOutput() -> [MDNSBrowserAction] {
        defer { output = [] }
        return output
    }
}
