// The DNS message codec: known bytes from python-zeroconf, round trips, compression, the mDNS
// flag bits, and refusal of hostile input with a typed error.
@testable import Discovery
import Testing

@Suite("DNS message codec")
struct DNSMessageTests {
    @Test func decodesPythonZeroconfResponse_RFC6762_10_2_cacheFlushBit() throws {
        let message = try DNSMessage(decoding: ZeroconfFixture.response)
        #expect(message.header.isResponse && message.header.isAuthoritative)
        #expect(message.answers.count == 3 && message.additionals.count == 2)
        let instance = try bigpeerType.prepending("Ship Node")
        #expect(message.answers[0] == DNSResourceRecord(name: bigpeerType, data: .ptr(instance), ttl: 4500))
        #expect(message.answers[1] == DNSResourceRecord(name: instance, data: .srv(priority: 0, weight: 0, port: 4040, target: name("node-1.local")),
                                                        ttl: 120, cacheFlush: true))
        #expect(TXTRecord(strings: try #require({ if case let .txt(s) = message.answers[2].data { s } else { nil } }()))["role"] == "node")
        #expect(message.additionals[0].data == .a(v4(192, 168, 7, 20)))
        #expect(message.additionals[1].data == .nsec(next: name("node-1.local"), types: [.a]))
    }

    @Test func decodesPythonZeroconfProbe_RFC6762_5_4_quBit() throws {
        let message = try DNSMessage(decoding: ZeroconfFixture.probe)
        #expect(!message.header.isResponse)
        #expect(message.questions == [DNSQuestion(name: try bigpeerType.prepending("Ship Node"), type: .any, unicastResponse: true)])
        #expect(message.authorities.count == 1 && message.authorities[0].type == .srv && !message.authorities[0].cacheFlush)
    }

    @Test func encodesTheSameBytesAsPythonZeroconf() throws {
        for fixture in [ZeroconfFixture.response, ZeroconfFixture.probe, ZeroconfFixture.browse] {
            #expect(try DNSMessage(decoding: fixture).encoded() == fixture)
        }
    }

    @Test func roundTripsEveryRecordType() throws {
        let instance = try bigpeerType.prepending("Café. \u{1F6A2} (2)")
        let message = DNSMessage(
            header: .response(id: 7),
            questions: [DNSQuestion(name: instance, type: .any, recordClass: DNSClass.any, unicastResponse: true)],
            answers: [
                DNSResourceRecord(name: name("h.local"), data: .a(v4(10, 1, 2, 3)), ttl: 120, cacheFlush: true),
                DNSResourceRecord(name: name("h.local"), data: .aaaa(IPAddress(bytes: Array(0..<16))!), ttl: 120),
                DNSResourceRecord(name: bigpeerType, data: .ptr(instance), ttl: 4500),
                DNSResourceRecord(name: instance, data: .srv(priority: 1, weight: 2, port: 3, target: name("h.local")), ttl: 0),
                DNSResourceRecord(name: instance, data: .txt([Array("a=b".utf8), []]), ttl: 4500),
            ],
            authorities: [DNSResourceRecord(name: instance, data: .nsec(next: instance, types: [.txt, .srv, DNSRecordType(rawValue: 300)]), ttl: 1)],
            additionals: [DNSResourceRecord(name: name("x.local"), data: .opaque(type: DNSRecordType(rawValue: 99), bytes: [1, 2, 3]), ttl: 9)])
        let bytes = try message.encoded()
        #expect(try DNSMessage(decoding: bytes) == message)
    }

    @Test func compressesRepeatedSuffixes() throws {
        let instances = try (0..<20).map { try bigpeerType.prepending("instance \($0)") }
        let message = DNSMessage(header: .response(), answers: instances.map { DNSResourceRecord(name: bigpeerType, data: .ptr($0), ttl: 1) })
        let bytes = try message.encoded()
        // Uncompressed, each record would repeat `_bigpeer._tcp.local` twice (21 bytes each): ~64 a record.
        #expect(bytes.count < 12 + 21 + 20 * 27)
        #expect(try DNSMessage(decoding: bytes) == message)
    }

    @Test func emptyTXTIsOneZeroByte_RFC6763_6_1() throws {
        let message = DNSMessage(header: .response(), answers: [DNSResourceRecord(name: name("a.local"), data: .txt([]), ttl: 1)])
        let bytes = try message.encoded()
        #expect(Array(bytes.suffix(3)) == [0, 1, 0])
        #expect(try DNSMessage(decoding: bytes).answers[0].data == .txt([[]]))
    }

    @Test func namesCompareASCIICaseInsensitivelyAndUTF8ByteExact_RFC6763_4_3() throws {
        #expect(name("Node-1.LOCAL.") == name("node-1.local"))
        #expect(Set([name("Node-1.LOCAL."), name("node-1.local")]).count == 1)
        // "é" precomposed and decomposed: equal as Swift Strings, different names on the wire.
        let composed = try bigpeerType.prepending("Caf\u{E9}"), decomposed = try bigpeerType.prepending("Cafe\u{301}")
        #expect("Caf\u{E9}" == "Cafe\u{301}")
        #expect(composed != decomposed)
        #expect(try bigpeerType.prepending("É") != bigpeerType.prepending("é"))
        #expect(try bigpeerType.prepending("a.b").description == "a\\.b._bigpeer._tcp.local.")
        // Ordered label by label from the left, case folded: consistent with ==.
        #expect(name("A.local") < name("b.local") && !(name("b.local") < name("a.b.local")))
        #expect(!(name("A.local") < name("a.LOCAL")) && !(name("a.LOCAL") < name("A.local")))
        #expect(!(name("local") < name("a.local")) && name("a") < name("a.b"))
    }

    @Test func nameLimits() {
        #expect(throws: DNSError.badLabel(offset: 0, length: 64)) { try DNSName(labels: [[UInt8](repeating: 0x61, count: 64)]) }
        #expect(throws: DNSError.emptyLabel) { try DNSName("a..local") }
        let long = [[UInt8]](repeating: [UInt8](repeating: 0x61, count: 63), count: 4)
        #expect(throws: DNSError.nameTooLong(length: 257)) { try DNSName(labels: long) }
    }

    @Test func txtPairs_RFC6763_6() throws {
        var txt = try TXTRecord([("v", "1"), ("role", "node")])
        try txt.set("flag", nil)
        #expect(txt.strings == [Array("v=1".utf8), Array("role=node".utf8), Array("flag".utf8)])
        let read = TXTRecord(strings: txt.strings + [Array("V=2".utf8), Array("=x".utf8), []])
        #expect(read["v"] == "1" && read["ROLE"] == "node" && read["flag"] == "" && read["missing"] == nil)
        #expect(read.entries.count == 3)
        #expect(throws: TXTRecordError.badKey("a=b")) { try TXTRecord([("a=b", "c")]) }
        #expect(throws: TXTRecordError.pairTooLong(key: "k", length: 256)) { try TXTRecord([("k", String(repeating: "x", count: 254))]) }
    }

    // MARK: hostile input

    static let header = [UInt8](repeating: 0, count: 4)

    @Test func rejectsPointerLoops() {
        // Question name at 12: a pointer to itself.
        let selfLoop = Self.header + [0, 1, 0, 0, 0, 0, 0, 0] + [0xC0, 12, 0, 1, 0, 1]
        #expect(throws: DNSError.badPointer(offset: 12, target: 12)) { try DNSMessage(decoding: selfLoop) }
        // Label "a" at 12, then a pointer back to 12: each jump must land before everything read.
        let labelLoop = Self.header + [0, 1, 0, 0, 0, 0, 0, 0] + [1, 0x61, 0xC0, 12, 0, 1, 0, 1]
        #expect(throws: DNSError.badPointer(offset: 14, target: 12)) { try DNSMessage(decoding: labelLoop) }
    }

    @Test func rejectsForwardPointers() {
        let forward = Self.header + [0, 1, 0, 0, 0, 0, 0, 0] + [0xC0, 18, 0, 1, 0, 1, 1, 0x61, 0]
        #expect(throws: DNSError.badPointer(offset: 12, target: 18)) { try DNSMessage(decoding: forward) }
    }

    @Test func rejectsReservedLabelTypesAndLongNames() {
        let extended = Self.header + [0, 1, 0, 0, 0, 0, 0, 0] + [0x41, 0, 0, 1, 0, 1]
        #expect(throws: DNSError.badLabel(offset: 12, length: 0x41)) { try DNSMessage(decoding: extended) }
        // 5 labels of 63 bytes: 321 bytes of name.
        let label: [UInt8] = [63] + [UInt8](repeating: 0x61, count: 63)
        let long = Self.header + [0, 1, 0, 0, 0, 0, 0, 0] + label.repeated(5) + [0, 0, 1, 0, 1]
        #expect(throws: DNSError.nameTooLong(length: 257)) { try DNSMessage(decoding: long) }
    }

    @Test func rejectsCountsTheBytesCannotHold() {
        let lying = Self.header + [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0] + [0, 0, 1, 0, 1]
        #expect(throws: DNSError.countsExceedMessage(questions: 65535, records: 65535, length: 17)) { try DNSMessage(decoding: lying) }
    }

    @Test func rejectsOversizedAndTruncatedMessages() throws {
        #expect(throws: DNSError.messageTooLong(length: 9001, limit: 9000)) { try DNSMessage(decoding: [UInt8](repeating: 0, count: 9001)) }
        #expect(throws: DNSError.truncated(offset: 0, needed: 1)) { try DNSMessage(decoding: [0]) }
        let full = ZeroconfFixture.response
        for cut in stride(from: 12, to: full.count, by: 7) {
            #expect(throws: DNSError.self) { try DNSMessage(decoding: Array(full.prefix(cut))) }
        }
        #expect(throws: DNSError.trailingBytes(offset: full.count)) { try DNSMessage(decoding: full + [0]) }
    }

    @Test func rejectsBadRdataLengths() {
        // An A record with 5 bytes of rdata.
        let badA = Self.header + [0, 0, 0, 1, 0, 0, 0, 0] + [0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 5, 1, 2, 3, 4, 5]
        #expect(throws: DNSError.badRecordData(type: 1, offset: 23)) { try DNSMessage(decoding: badA) }
        // A TXT string that runs past its rdata.
        let badTXT = Self.header + [0, 0, 0, 1, 0, 0, 0, 0] + [0, 0, 16, 0, 1, 0, 0, 0, 1, 0, 2, 5, 0x61]
        #expect(throws: DNSError.truncated(offset: 24, needed: 4)) { try DNSMessage(decoding: badTXT) }
        // An NSEC window with a 33-byte bitmap.
        let badNSEC = Self.header + [0, 0, 0, 1, 0, 0, 0, 0] + [0, 0, 47, 0, 1, 0, 0, 0, 1, 0, 36, 0, 0, 33] + [UInt8](repeating: 0, count: 33)
        #expect(throws: DNSError.badTypeBitmap(offset: 24)) { try DNSMessage(decoding: badNSEC) }
    }

    @Test func writerSplitsKnownAnswersAcrossPacketsWithTC_RFC6762_7_2() throws {
        let answers = try (0..<200).map { DNSResourceRecord(name: bigpeerType, data: .ptr(try bigpeerType.prepending("instance number \($0)")), ttl: 4500) }
        let packets = PacketPacker.pack(header: .query(), questions: [DNSQuestion(name: bigpeerType, type: .ptr)], answers: answers)
        #expect(packets.count > 1)
        let messages = try packets.map { try DNSMessage(decoding: $0) }
        #expect(messages.dropLast().allSatisfy(\.header.isTruncated) && !(messages.last?.header.isTruncated ?? true))
        #expect(messages.flatMap(\.answers) == answers)
        #expect(packets.allSatisfy { $0.count <= PacketPacker.defaultLimit })
    }
}

extension Array {
    func repeated(_ times: Int) -> [Element] { (0..<times).flatMap { _ in self } }
}
