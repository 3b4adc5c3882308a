// Answering queries (RFC 6762 §6) and hearing other responders' answers (§7.4, §9).
//
// Answers come from the records of the interface the query arrived on, so they carry only that
// interface's addresses (§6.2, §14). Unique answers go out at once, shared ones (PTR) after a
// random 20–120 ms (400–500 ms when the querier's known answers continue in another packet,
// §7.2), merged per interface; known answers the querier already holds with at least half their
// TTL are left out (§7.1), and so are pending answers another responder sends first (§7.4).

/// The multicast response an interface owes: sent at `due`.
struct PendingResponse: Sendable {
    var due: Int64
    var answers: [DNSResourceRecord] = []
    /// Per answer (TTL 0, no cache-flush bit), the queriers still waiting for it: a querier's
    /// known answers in a later packet (§7.2) release only that querier.
    var waiting: [DNSResourceRecord: Set<Endpoint>] = [:]
    var additionals: [DNSResourceRecord] = []
    /// Answers to a probe may repeat a record after 250 ms instead of 1 s (§6).
    var defendsProbe = false

    mutating func add(_ record: DNSResourceRecord, for querier: Endpoint) {
        if !answers.contains(record) { answers.append(record) }
        waiting[record.normalized, default: []].insert(querier)
    }

    /// Releases `querier` from the answers `isKnown` says it holds; returns how many answers no
    /// one waits for any more (and are dropped).
    mutating func release(_ querier: Endpoint, where isKnown: (DNSResourceRecord) -> Bool) -> Int {
        let before = answers.count
        answers.removeAll { answer in
            guard isKnown(answer) else { return false }
            let key = answer.normalized
            waiting[key]?.remove(querier)
            guard waiting[key]?.isEmpty ?? true else { return false }
            waiting[key] = nil
            return true
        }
        return before - answers.count
    }

    /// Drops the answers another responder just gave (§7.4), whoever waits; returns how many.
    mutating func drop(where given: (DNSResourceRecord) -> Bool) -> Int {
        let dropped = answers.filter(given)
        answers.removeAll(where: given)
        for record in dropped { waiting[record.normalized] = nil }
        return dropped.count
    }
}

extension MDNSResponder {
    /// §6.7: legacy unicast answers carry a TTL of at most 10 s.
    static let legacyTTL: UInt32 = 10

    mutating func handleQuery(_ message: DNSMessage, packet: ReceivedPacket, now: Int64) {
        let interface = packet.interface
        if !message.authorities.isEmpty { breakProbeTies(message, on: interface, now: now) }
        // Known answers of this packet also cancel what we already owe this querier (§7.2).
        if var owed = pending[interface], !message.answers.isEmpty {
            counters.knownAnswerSuppressions += owed.release(packet.source) { isKnown($0, in: message.answers) }
            pending[interface] = owed
        }
        guard !message.questions.isEmpty else { return }
        let legacy = packet.source.port != mdnsPort
        let available = answeringEntities(on: interface)
        let owned = available.flatMap { records(of: $0, on: interface) }
        var answers: [DNSResourceRecord] = [], unicastAnswers: [DNSResourceRecord] = []
        var answeredQuestions: [DNSQuestion] = []
        for question in message.questions {
            var matches = owned.filter { question.isAnswered(by: $0) }
            if matches.isEmpty, question.type != .any,
               let id = available.first(where: { entity($0).name == question.name }) {
                // The name is ours but has no record of that type: say so (§6.1).
                matches = [nsecRecord(of: id, on: interface)]
                counters.negativeAnswers += 1
            }
            let kept = matches.filter { !isKnown($0, in: message.answers) }
            counters.knownAnswerSuppressions += matches.count - kept.count
            guard !kept.isEmpty else { continue }
            answeredQuestions.append(question)
            // §5.4: QU (or a direct unicast query, §5.5) is answered by unicast, unless the record
            // was not multicast on this link within a quarter of its TTL.
            let wantsUnicast = question.unicastResponse || !packet.viaMulticast
            for record in kept {
                if legacy || (wantsUnicast && multicastRecently(record, on: interface, within: Int64(record.ttl) * 250, now: now)) {
                    if !unicastAnswers.contains(record) { unicastAnswers.append(record) }
                } else if !answers.contains(record) {
                    answers.append(record)
                }
            }
        }
        if !unicastAnswers.isEmpty {
            sendUnicast(unicastAnswers, questions: answeredQuestions, to: packet, legacy: legacy, known: message.answers)
        }
        guard !answers.isEmpty else { return }
        let additionals = additionalRecords(for: answers, on: interface).filter { !isKnown($0, in: message.answers) }
        let allUnique = answers.allSatisfy(\.cacheFlush)
        let delay: Int64 = allUnique ? 0 : (message.header.isTruncated ? jitter.millis(400...500) : jitter.millis(20...120))
        var owed = pending[interface] ?? PendingResponse(due: now + delay)
        owed.due = min(owed.due, now + delay)
        for record in answers { owed.add(record, for: packet.source) }
        for record in additionals where !owed.additionals.contains(record) { owed.additionals.append(record) }
        owed.defendsProbe = owed.defendsProbe || !message.authorities.isEmpty
        pending[interface] = owed
        if delay == 0 { flushPending(on: interface, now: now) }
    }

    /// §7.1: the querier lists the record with at least half its TTL.
    func isKnown(_ record: DNSResourceRecord, in knownAnswers: [DNSResourceRecord]) -> Bool {
        knownAnswers.contains { $0.isSameRecord(as: record) && UInt64($0.ttl) * 2 >= UInt64(record.ttl) }
    }

    func multicastRecently(_ record: DNSResourceRecord, on interface: InterfaceID, within window: Int64, now: Int64) -> Bool {
        guard let last = lastMulticast[interface]?[record.normalized] else { return false }
        return now - last < window
    }

    /// §6.2 and RFC 6763 §12: with a PTR the instance's SRV, TXT and the host's addresses; with an
    /// SRV the addresses; with one address family the other; the host's NSEC when it lacks one.
    func additionalRecords(for answers: [DNSResourceRecord], on interface: InterfaceID) -> [DNSResourceRecord] {
        let available = answeringEntities(on: interface)
        var extra: [DNSResourceRecord] = []
        func addHost() {
            guard available.contains(.host) else { return }
            extra += uniqueRecords(of: .host, on: interface)
            if Set(extra.map(\.type)).intersection([.a, .aaaa]).count < 2 { extra.append(nsecRecord(of: .host, on: interface)) }
        }
        for answer in answers {
            switch answer.data {
            case let .ptr(target):
                if let id = available.first(where: { $0 != .host && entity($0).name == target }) {
                    extra += uniqueRecords(of: id, on: interface)
                    addHost()
                }
            case let .srv(_, _, _, target) where target == host.name:
                addHost()
            case .a, .aaaa:
                if answer.name == host.name { addHost() }
            default:
                break
            }
        }
        var unique: [DNSResourceRecord] = []
        for record in extra where !answers.contains(where: { $0.isSameRecord(as: record) }) && !unique.contains(record) {
            unique.append(record)
        }
        return unique
    }

    mutating func sendUnicast(_ answers: [DNSResourceRecord], questions: [DNSQuestion], to packet: ReceivedPacket,
                              legacy: Bool, known: [DNSResourceRecord]) {
        var additionals = additionalRecords(for: answers, on: packet.interface).filter { !isKnown($0, in: known) }
        var answers = answers
        var header = DNSHeader.response()
        var echoed: [DNSQuestion] = []
        if legacy {
            // §6.7: echo the ID and the questions; no cache-flush bits; TTL ≤ 10 s.
            func legacyForm(_ record: DNSResourceRecord) -> DNSResourceRecord {
                var copy = record.with(ttl: min(record.ttl, Self.legacyTTL))
                copy.cacheFlush = false
                return copy
            }
            answers = answers.map(legacyForm)
            additionals = additionals.map(legacyForm)
            header = .response(id: UInt16(packet.bytes[0]) << 8 | UInt16(packet.bytes[1]))
            echoed = questions.map { DNSQuestion(name: $0.name, type: $0.type, recordClass: $0.recordClass) }
            counters.legacyReplies += 1
        } else {
            counters.unicastResponses += 1
        }
        send(PacketPacker.pack(header: header, questions: echoed, answers: answers, additionals: additionals, limit: configuration.packetLimit),
             on: packet.interface, to: .unicast(packet.source))
    }

    /// Sends the interface's pending multicast answers when due, less those multicast within the
    /// last second (250 ms when defending a probe) (§6).
    mutating func flushPending(on interface: InterfaceID, now: Int64) {
        guard let owed = pending[interface], owed.due <= now else { return }
        pending[interface] = nil
        let window: Int64 = owed.defendsProbe ? 250 : 1000
        let answers = owed.answers.filter { !multicastRecently($0, on: interface, within: window, now: now) }
        guard !answers.isEmpty else { return }
        let additionals = owed.additionals.filter { additional in !answers.contains { $0.isSameRecord(as: additional) } }
        send(PacketPacker.pack(header: .response(), answers: answers, additionals: additionals, limit: configuration.packetLimit),
             on: interface, to: .multicast)
        noteMulticast(answers + additionals, on: interface, now: now)
        counters.multicastResponses += 1
    }

    /// A response from another responder: conflicts with our names (§9), and answers we owe that
    /// it already gave with at least half our TTL (§7.4).
    mutating func handleResponse(_ message: DNSMessage, on interface: InterfaceID, now: Int64) {
        detectConflicts(message, on: interface, now: now)
        guard var owed = pending[interface] else { return }
        let given = message.answers + message.additionals
        counters.duplicateAnswerSuppressions += owed.drop { isKnown($0, in: given) }
        pending[interface] = owed.answers.isEmpty ? nil : owed
    }
}
