@testable import DBus
import Testing

@Suite("D-Bus messages")
struct DBusMessageTests {
    @Test func capturedMethodCall_decodesAndReencodesByteForByte() throws {
        let m = try DBusMessage.decode(Captured.registerAdvertisement)
        #expect(m.kind == .methodCall)
        #expect(m.serial == 2)
        #expect(m.path == "/org/bluez/hci0")
        #expect(m.interface == "org.bluez.LEAdvertisingManager1")
        #expect(m.member == "RegisterAdvertisement")
        #expect(m.destination == "org.example.Nobody")
        #expect(m.sender == ":1.1")
        #expect(m.body == [.objectPath("/org/bigpeer/advertisement0"),
                           .dictionary(key: .string, value: .string, [(.string("k"), .string("v"))])])
        #expect(m.signature == "oa{ss}")
        #expect(try m.encode(serial: 2) == Captured.registerAdvertisement)
    }

    @Test func capturedSignal_decodesAndReencodesByteForByte() throws {
        let m = try DBusMessage.decode(Captured.signal)
        #expect(m.kind == .signal)
        #expect(m.flags == .noReplyExpected)
        #expect(m.body == [.string("héllo"), .array(.uint16, [.uint16(1), .uint16(2), .uint16(3)]), .variant(.int64(-5))])
        #expect(try m.encode(serial: m.serial) == Captured.signal)
    }

    @Test func capturedErrorAndHello_decode() throws {
        let e = try DBusMessage.decode(Captured.serviceUnknown)
        #expect(e.kind == .error)
        #expect(e.errorName == "org.freedesktop.DBus.Error.ServiceUnknown")
        #expect(e.replySerial == 2)
        #expect(e.errorMessage == "The name org.example.Nobody was not provided by any .service files")
        let h = try DBusMessage.decode(Captured.hello)
        #expect(h.member == "Hello" && h.destination == "org.freedesktop.DBus" && h.body.isEmpty)
    }

    @Test func bigEndianFromGLib_decodes() throws {
        let m = try DBusMessage.decode(Captured.bigEndian)
        #expect(m.member == "Big" && m.serial == 9)
        #expect(m.body == [.uint32(0x0102_0304), .string("be"),
                           .dictionary(key: .string, value: .variant, [(.string("k"), .variant(.double(1.5)))]),
                           .structure([.byte(7), .int16(-2)])])
        // Written back little-endian, it reads back the same.
        #expect(try DBusMessage.decode(m.encode(serial: 9)) == m)
    }

    @Test func parser_cutsAStreamFedOneByteAtATime() throws {
        var parser = DBusMessageParser()
        var got: [DBusMessage] = []
        for b in Captured.signal + Captured.registerAdvertisement {
            parser.append([b])
            while let m = try parser.next() { got.append(m) }
        }
        #expect(got.map(\.member) == ["Changed", "RegisterAdvertisement"])
    }

    @Test func parser_refusesAnOversizedMessageFromItsHeader() {
        var parser = DBusMessageParser(maxMessageSize: 64)
        parser.append(Captured.registerAdvertisement.prefix(16))
        // The header fields alone (157 bytes) are over the limit.
        #expect(throws: DBusError.tooLarge(157, limit: 64)) { try parser.next() }
        var huge = Captured.signal.prefix(16).map { $0 }
        huge[4...7] = [0xFF, 0xFF, 0xFF, 0x7F]  // body length 2^31 - 1
        var p2 = DBusMessageParser()
        p2.append(huge)
        #expect(throws: DBusError.self) { try p2.next() }
    }

    @Test func methodReturnAndError_answerTheCall() throws {
        var call = DBusMessage.methodCall(destination: "org.bluez", path: "/p", interface: "i.f", member: "M")
        call.serial = 7
        call.sender = ":1.9"
        let reply = try DBusMessage.decode(DBusMessage.methodReturn(to: call, body: [.boolean(true)]).encode(serial: 1))
        #expect(reply.replySerial == 7 && reply.destination == ":1.9" && reply.body == [.boolean(true)])
        let error = try DBusMessage.decode(DBusMessage.error(to: call, name: "org.bluez.Error.Failed", message: "no").encode(serial: 2))
        #expect(error.errorName == "org.bluez.Error.Failed" && error.errorMessage == "no" && error.replySerial == 7)
    }

    @Test func requiredHeaderFields_areEnforcedBothWays() throws {
        #expect(throws: DBusError.self) { try DBusMessage(kind: .signal, path: "/a", member: "M").encode(serial: 1) }
        #expect(throws: DBusError.self) { try DBusMessage(kind: .methodReturn).encode(serial: 1) }
        #expect(throws: DBusError.self) { try DBusMessage.methodCall(destination: nil, path: "/a", interface: nil, member: "M").encode(serial: 0) }
        // The captured call without its MEMBER field: swap the field code 3 for an unknown one (ignored).
        var bytes = Captured.registerAdvertisement
        let at = try #require(bytes.indices.dropLast(2).first { bytes[$0] == 3 && bytes[$0 + 1] == 1 && bytes[$0 + 2] == UInt8(ascii: "s") })
        bytes[at] = 200
        #expect(throws: DBusError.self) { try DBusMessage.decode(bytes) }
    }
}
