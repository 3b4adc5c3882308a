// Decoding a DNS message from hostile bytes. Every read is bounds-checked; the header's counts are
// checked against what the bytes can hold before anything is allocated for them; a compression
// pointer must point strictly before every byte of the name read so far, so a name is read in at
// most 255 bytes of labels and the pointer chain strictly moves backwards (no loops).

extension DNSMessage {
    /// Decodes one message. `maxLength` defaults to the mDNS maximum.
    public init(decoding bytes: [UInt8], maxLength: Int = DNSMessage.maxLength) throws(DNSError) {
        if bytes.count > maxLength { throw .messageTooLong(length: bytes.count, limit: maxLength) }
        var reader = DNSMessageReader(bytes: bytes)
        let header = DNSHeader(id: try reader.u16(), flags: try reader.u16())
        let qd = Int(try reader.u16()), an = Int(try reader.u16()), ns = Int(try reader.u16()), ar = Int(try reader.u16())
        // The smallest question is 5 bytes (root name, type, class); the smallest record 11.
        let records = an + ns + ar
        if qd * 5 + records * 11 > bytes.count - 12 {
            throw .countsExceedMessage(questions: qd, records: records, length: bytes.count)
        }
        var questions: [DNSQuestion] = []
        questions.reserveCapacity(qd)
        for _ in 0..<qd { questions.append(try reader.question()) }
        self.init(header: header, questions: questions,
                  answers: try reader.records(an), authorities: try reader.records(ns), additionals: try reader.records(ar))
        if reader.offset != bytes.count { throw .trailingBytes(offset: reader.offset) }
    }
}

struct DNSMessageReader {
    let bytes: [UInt8]
    var offset = 0
    /// Where the current rdata ends: reads past it fail (the message end outside rdata).
    var limit: Int

    init(bytes: [UInt8]) {
        self.bytes = bytes
        limit = bytes.count
    }

    mutating func need(_ n: Int) throws(DNSError) {
        if n > limit - offset { throw .truncated(offset: offset, needed: n - (limit - offset)) }
    }

    mutating func u8() throws(DNSError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() throws(DNSError) -> UInt16 {
        try need(2)
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    mutating func u32() throws(DNSError) -> UInt32 {
        UInt32(try u16()) << 16 | UInt32(try u16())
    }

    mutating func take(_ n: Int) throws(DNSError) -> [UInt8] {
        try need(n)
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }

    /// A possibly compressed name (RFC 1035 §4.1.4). Labels reached through a pointer may lie
    /// anywhere before the pointer, inside or outside the current rdata.
    mutating func name() throws(DNSError) -> DNSName {
        var labels: [[UInt8]] = []
        var wireLength = 1
        var position = offset
        /// Every byte of the name read so far lies at or after this offset.
        var earliest = offset
        var jumped = false
        while true {
            let end = jumped ? bytes.count : limit
            guard position < end else { throw .truncated(offset: position, needed: 1) }
            let length = Int(bytes[position])
            switch length & 0xC0 {
            case 0x00:
                if length == 0 {
                    if !jumped { offset = position + 1 }
                    return DNSName(unchecked: labels)
                }
                guard position + 1 + length <= end else { throw .truncated(offset: position + 1, needed: position + 1 + length - end) }
                wireLength += 1 + length
                if wireLength > DNSName.maxWireLength { throw .nameTooLong(length: wireLength) }
                labels.append(Array(bytes[position + 1..<position + 1 + length]))
                position += 1 + length
            case 0xC0:
                guard position + 1 < end else { throw .truncated(offset: position, needed: 2) }
                let target = (length & 0x3F) << 8 | Int(bytes[position + 1])
                if target >= earliest { throw .badPointer(offset: position, target: target) }
                if !jumped { offset = position + 2 }
                jumped = true
                earliest = target
                position = target
            default:
                throw .badLabel(offset: position, length: length)
            }
        }
    }

    mutating func question() throws(DNSError) -> DNSQuestion {
        let name = try name()
        let type = DNSRecordType(rawValue: try u16())
        let rawClass = try u16()
        return DNSQuestion(name: name, type: type, recordClass: rawClass & ~DNSClass.topBit,
                           unicastResponse: rawClass & DNSClass.topBit != 0)
    }

    mutating func records(_ count: Int) throws(DNSError) -> [DNSResourceRecord] {
        var records: [DNSResourceRecord] = []
        records.reserveCapacity(count)
        for _ in 0..<count { records.append(try record()) }
        return records
    }

    mutating func record() throws(DNSError) -> DNSResourceRecord {
        let name = try name()
        let type = DNSRecordType(rawValue: try u16())
        let rawClass = try u16()
        let ttl = try u32()
        let length = Int(try u16())
        try need(length)
        let start = offset
        let end = offset + length
        limit = end
        defer { limit = bytes.count }
        let data = try recordData(type: type, start: start, end: end)
        if offset != end { throw .badRecordData(type: type.rawValue, offset: start) }
        return DNSResourceRecord(name: name, data: data, ttl: ttl, cacheFlush: rawClass & DNSClass.topBit != 0,
                                 recordClass: rawClass & ~DNSClass.topBit)
    }

    mutating func recordData(type: DNSRecordType, start: Int, end: Int) throws(DNSError) -> DNSRecordData {
        let length = end - start
        switch type {
        case .a:
            guard length == 4, let address = IPAddress(bytes: try take(4)) else { throw .badRecordData(type: type.rawValue, offset: start) }
            return .a(address)
        case .aaaa:
            guard length == 16, let address = IPAddress(bytes: try take(16)) else { throw .badRecordData(type: type.rawValue, offset: start) }
            return .aaaa(address)
        case .ptr:
            return .ptr(try name())
        case .srv:
            return .srv(priority: try u16(), weight: try u16(), port: try u16(), target: try name())
        case .txt:
            var strings: [[UInt8]] = []
            while offset < end { strings.append(try take(Int(try u8()))) }
            // Empty rdata (seen in the wild) reads as the canonical empty TXT, one empty string.
            return .txt(strings.isEmpty ? [[]] : strings)
        case .nsec:
            return try nsec(end: end)
        default:
            return .opaque(type: type, bytes: try take(length))
        }
    }

    /// RFC 4034 §4.1.2 windows, in ascending order, each 1…32 bytes of bitmap.
    mutating func nsec(end: Int) throws(DNSError) -> DNSRecordData {
        let next = try name()
        var types: [DNSRecordType] = []
        var lastWindow = -1
        while offset < end {
            let at = offset
            let window = Int(try u8())
            let length = Int(try u8())
            guard window > lastWindow, (1...32).contains(length) else { throw .badTypeBitmap(offset: at) }
            lastWindow = window
            for (index, byte) in try take(length).enumerated() where byte != 0 {
                for bit in 0..<8 where byte & (0x80 >> bit) != 0 {
                    types.append(DNSRecordType(rawValue: UInt16(window << 8 | index << 3 | bit)))
                }
            }
        }
        return .nsec(next: next, types: types)
    }
}
