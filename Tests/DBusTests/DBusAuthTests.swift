@testable import DBus
import Testing

@Suite("D-Bus SASL EXTERNAL")
struct DBusAuthTests {
    @Test func initialBytes_sendTheUidAsHexOfItsDecimalDigits() {
        #expect(DBusAuthClient.initialBytes(uid: 1000) == [0] + Array("AUTH EXTERNAL 31303030\r\n".utf8))
        #expect(DBusAuthClient.initialBytes(uid: 0) == [0] + Array("AUTH EXTERNAL 30\r\n".utf8))
    }

    @Test func ok_isAnsweredWithBegin_andLeftoverBytesAreKept() throws {
        var auth = DBusAuthClient()
        #expect(try auth.receive(Array("OK 1234".utf8)) == .needMoreData)
        #expect(try auth.receive(Array("abcd\r\nlXYZ".utf8)) == .authenticated(send: Array("BEGIN\r\n".utf8), guid: "1234abcd", leftover: Array("lXYZ".utf8)))
        #expect(throws: DBusError.self) { try auth.receive([1]) }
    }

    @Test func rejectionsAndGarbage_fail() {
        var a = DBusAuthClient()
        #expect(throws: DBusError.self) { try a.receive(Array("REJECTED DBUS_COOKIE_SHA1\r\n".utf8)) }
        var b = DBusAuthClient()
        #expect(throws: DBusError.self) { try b.receive(Array("ERROR \"bad\"\r\n".utf8)) }
        var c = DBusAuthClient()
        #expect(throws: DBusError.self) { try c.receive(Array("HELLO\r\n".utf8)) }
        var d = DBusAuthClient()
        #expect(throws: DBusError.self) { try d.receive([UInt8](repeating: 65, count: 2000)) }
    }

    @Test func data_isAnsweredWithEmptyData() throws {
        var auth = DBusAuthClient()
        #expect(try auth.receive(Array("DATA\r\n".utf8)) == .send(Array("DATA\r\n".utf8)))
    }
}
