// Splitting what one logical message says into datagrams that fit the link: questions and the
// answer and authority sections continue in the next packet (a query's earlier packets carry TC,
// RFC 6762 §7.2); additional records are optional, so one that does not fit is left out (§6.2:
// "should" include, not "must").

enum PacketPacker {
    /// Ethernet's 1500-byte MTU less IPv6 and UDP headers: a packet that never fragments (§17).
    static let defaultLimit = 1452

    /// The packets. A record too large for an empty packet is skipped.
    static func pack(header: DNSHeader, questions: [DNSQuestion] = [], answers: [DNSResourceRecord] = [],
                     authorities: [DNSResourceRecord] = [], additionals: [DNSResourceRecord] = [],
                     limit: Int = defaultLimit) -> [[UInt8]] {
        var packets: [[UInt8]] = []
        var writer = DNSMessageWriter(header: header, limit: limit)
        func flush() {
            packets.append(writer.finished(truncated: !header.isResponse))
            writer = DNSMessageWriter(header: header, limit: limit)
        }
        for question in questions where !writer.append(question) {
            flush()
            _ = writer.append(question)
        }
        for (records, section) in [(answers, DNSMessageWriter.Section.answer), (authorities, .authority)] {
            for record in records where !writer.append(record, to: section) {
                // A later packet holds no questions: a probe's authority records must stay with their
                // question, so probes never split (they are small); answers and known answers may.
                flush()
                _ = writer.append(record, to: section)
            }
        }
        for record in additionals { _ = writer.append(record, to: .additional) }
        if !writer.isEmpty { packets.append(writer.finished()) }
        return packets
    }
}
