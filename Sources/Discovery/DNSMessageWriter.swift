// Encoding a DNS message with name compression (RFC 1035 §4.1.4). Sections are appended in wire
// order; an append that would pass the size limit is undone and reported, so a sender can fill a
// packet up to the path's MTU and carry the rest in the next one.

struct DNSMessageWriter {
    private(set) var bytes: [UInt8]
    let limit: Int
    /// Offsets of name suffixes already written (keyed by their lower-cased labels): the targets
    /// of compression pointers, which reach offsets below 0x4000 only.
    private var suffixes: [DNSName: Int] = [:]
    /// The suffixes in the order they were added, so a refused append can take its own back.
    private var suffixLog: [DNSName] = []
    private var counts = (questions: 0, answers: 0, authorities: 0, additionals: 0)

    enum Section { case answer, authority, additional }

    init(header: DNSHeader, limit: Int = DNSMessage.maxLength) {
        self.limit = limit
        bytes = []
        bytes.reserveCapacity(512)
        put16(header.id)
        put16(header.flags)
        bytes.append(contentsOf: [UInt8](repeating: 0, count: 8))
    }

    var isEmpty: Bool { counts == (0, 0, 0, 0) }

    /// The message with its section counts filled in (and the TC bit, when more known answers
    /// follow in the next packet: RFC 6762 §7.2).
    func finished(truncated: Bool = false) -> [UInt8] {
        var out = bytes
        if truncated { out[2] |= UInt8(DNSHeader.truncatedBit >> 8) }
        for (index, count) in [counts.questions, counts.answers, counts.authorities, counts.additionals].enumerated() {
            out[4 + 2 * index] = UInt8(count >> 8)
            out[5 + 2 * index] = UInt8(count & 0xFF)
        }
        return out
    }

    /// Appends a question; false (and nothing written) when it does not fit.
    mutating func append(_ question: DNSQuestion) -> Bool {
        guard counts.answers + counts.authorities + counts.additionals == 0 else { return false }
        let saved = save()
        writeName(question.name)
        put16(question.type.rawValue)
        put16(question.recordClass | (question.unicastResponse ? DNSClass.topBit : 0))
        guard bytes.count <= limit, counts.questions < 0xFFFF else { restore(saved); return false }
        counts.questions += 1
        return true
    }

    /// Appends a record to `section` (sections in wire order); false (and nothing written) when
    /// it does not fit or cannot be encoded (a TXT string over 255 bytes).
    mutating func append(_ record: DNSResourceRecord, to section: Section) -> Bool {
        switch section {
        case .answer: guard counts.authorities + counts.additionals == 0 else { return false }
        case .authority: guard counts.additionals == 0 else { return false }
        case .additional: break
        }
        let saved = save()
        writeName(record.name)
        put16(record.type.rawValue)
        put16(record.recordClass | (record.cacheFlush ? DNSClass.topBit : 0))
        put16(UInt16(record.ttl >> 16))
        put16(UInt16(record.ttl & 0xFFFF))
        let lengthAt = bytes.count
        put16(0)
        guard writeData(record.data) else { restore(saved); return false }
        let length = bytes.count - lengthAt - 2
        guard bytes.count <= limit, length <= 0xFFFF else { restore(saved); return false }
        bytes[lengthAt] = UInt8(length >> 8)
        bytes[lengthAt + 1] = UInt8(length & 0xFF)
        switch section {
        case .answer: counts.answers += 1
        case .authority: counts.authorities += 1
        case .additional: counts.additionals += 1
        }
        return true
    }

    private mutating func writeData(_ data: DNSRecordData) -> Bool {
        switch data {
        case let .a(address), let .aaaa(address):
            bytes.append(contentsOf: address.bytes)
        case let .ptr(name):
            writeName(name)
        case let .srv(priority, weight, port, target):
            put16(priority)
            put16(weight)
            put16(port)
            writeName(target)
        case let .txt(strings):
            if strings.isEmpty { bytes.append(0) }
            for string in strings {
                guard string.count <= 255 else { return false }
                bytes.append(UInt8(string.count))
                bytes.append(contentsOf: string)
            }
        case let .nsec(next, types):
            writeName(next)
            bytes.append(contentsOf: Self.typeBitmap(types))
        case let .opaque(_, raw):
            bytes.append(contentsOf: raw)
        }
        return true
    }

    /// RFC 4034 §4.1.2: per 256-type window, the window number, the bitmap length and the bitmap.
    static func typeBitmap(_ types: [DNSRecordType]) -> [UInt8] {
        var windows: [UInt8: [UInt8]] = [:]
        for type in types {
            let window = UInt8(type.rawValue >> 8), low = Int(type.rawValue & 0xFF)
            var bitmap = windows[window] ?? []
            if bitmap.count <= low / 8 { bitmap += [UInt8](repeating: 0, count: low / 8 + 1 - bitmap.count) }
            bitmap[low / 8] |= 0x80 >> UInt8(low % 8)
            windows[window] = bitmap
        }
        var out: [UInt8] = []
        for window in windows.keys.sorted() {
            let bitmap = windows[window] ?? []
            out.append(window)
            out.append(UInt8(bitmap.count))
            out.append(contentsOf: bitmap)
        }
        return out
    }

    private mutating func writeName(_ name: DNSName) {
        var labels = name.labels[...]
        while !labels.isEmpty {
            let suffix = DNSName(unchecked: Array(labels))
            if let target = suffixes[suffix] {
                put16(0xC000 | UInt16(target))
                return
            }
            if bytes.count < 0x4000 {
                suffixes[suffix] = bytes.count
                suffixLog.append(suffix)
            }
            let label = labels.removeFirst()
            bytes.append(UInt8(label.count))
            bytes.append(contentsOf: label)
        }
        bytes.append(0)
    }

    private mutating func put16(_ value: UInt16) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xFF))
    }

    private func save() -> (bytes: Int, suffixes: Int) { (bytes.count, suffixLog.count) }

    private mutating func restore(_ saved: (bytes: Int, suffixes: Int)) {
        bytes.removeSubrange(saved.bytes...)
        for suffix in suffixLog[saved.suffixes...] { suffixes[suffix] = nil }
        suffixLog.removeSubrange(saved.suffixes...)
    }
}

extension DNSMessage {
    /// The wire form, compressed. Fails when the message exceeds `limit` bytes or a TXT string
    /// exceeds 255 bytes.
    public func encoded(limit: Int = DNSMessage.maxLength) throws(DNSError) -> [UInt8] {
        var writer = DNSMessageWriter(header: header, limit: limit)
        for question in questions where !writer.append(question) { throw Self.encodeFailure(writer, limit) }
        for (records, section) in [(answers, DNSMessageWriter.Section.answer), (authorities, .authority), (additionals, .additional)] {
            for record in records where !writer.append(record, to: section) {
                if case let .txt(strings) = record.data, let long = strings.first(where: { $0.count > 255 }) {
                    throw .txtStringTooLong(length: long.count)
                }
                throw Self.encodeFailure(writer, limit)
            }
        }
        return writer.finished()
    }

    private static func encodeFailure(_ writer: DNSMessageWriter, _ limit: Int) -> DNSError {
        .messageTooLong(length: writer.bytes.count, limit: limit)
    }
}
