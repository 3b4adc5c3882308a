import BigPeerTestSupport
import DBus
import Testing
@testable import BLEDiscovery

@Suite("BlueZ registration objects")
struct BlueZRegistrationTests {
    @Test func psm_isLittleEndian() {
        #expect(BigPeerBLE.psmBytes(0x0081) == [0x81, 0x00])
        #expect(BigPeerBLE.psmBytes(0x1234) == [0x34, 0x12])
        #expect(BigPeerBLE.psm(from: [0x34, 0x12]) == 0x1234)
        #expect(BigPeerBLE.psm(from: [0x34]) == nil)
    }

    @Test func advertisement_fullAndCompact() {
        let r = BlueZRegistration(psm: 0x80, localName: "node")
        let full = r.advertisement(.full) {}.properties
        #expect(full["Type"] == .string("peripheral"))
        #expect(full["ServiceUUIDs"] == .array(.string, [.string(BigPeerBLE.serviceUUID)]))
        #expect(full["ServiceData"]?.stringKeyedDictionary?[BigPeerBLE.serviceUUID]?.byteArray == [0x80, 0])
        #expect(full["LocalName"] == .string("node"))
        let compact = r.advertisement(.compact) {}.properties
        #expect(compact.keys.sorted() == ["ServiceData", "Type"])
    }

    @Test func readValue_returnsThePSM_andHonoursTheOffset() {
        let c = BlueZRegistration(psm: 0x1234, localName: "n").psmCharacteristic
        let read = c.methods["ReadValue"]
        let plain = DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "ReadValue", body: [.properties([:])])
        #expect(read?(plain) == .success([.bytes([0x34, 0x12])]))
        let offset = DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "ReadValue", body: [.properties(["offset": .uint16(1)])])
        #expect(read?(offset) == .success([.bytes([0x12])]))
        let past = DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "ReadValue", body: [.properties(["offset": .uint16(3)])])
        #expect(read?(past) == .failure(DBusMethodError(name: "org.bluez.Error.InvalidOffset", message: "offset 3 past the value")))
    }

    @Test func releasingTheAdvertisement_isReported() {
        let released = MutexBox(false)
        let ad = BlueZRegistration(psm: 1, localName: "n").advertisement(.full) { released.withLock { $0 = true } }
        _ = ad.methods["Release"]?(DBusMessage.methodCall(destination: nil, path: "/", interface: nil, member: "Release"))
        #expect(released.withLock { $0 })
    }

    @Test func ownerChange_onlyFromTheBus_andOnlyForBlueZ() {
        func signal(_ name: String, _ old: String, _ new: String, sender: String = "org.freedesktop.DBus") -> DBusMessage {
            var m = DBusMessage.signal(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                                       body: [.string(name), .string(old), .string(new)])
            m.sender = sender
            return m
        }
        #expect(BlueZ.ownerChange(signal("org.bluez", ":1.5", "")) == .left)
        #expect(BlueZ.ownerChange(signal("org.bluez", "", ":1.9")) == .arrived)
        #expect(BlueZ.ownerChange(signal("org.example", ":1.5", "")) == nil)
        #expect(BlueZ.ownerChange(signal("org.bluez", ":1.5", "", sender: ":1.7")) == nil, "another client cannot forge it")
    }

    @Test func busAddresses() throws {
        #expect(try DBusBusAddress(parsing: "unix:path=/run/dbus/system_bus_socket") == .path("/run/dbus/system_bus_socket"))
        #expect(try DBusBusAddress(parsing: "tcp:host=x,port=1;unix:path=/tmp/a%20b,guid=00") == .path("/tmp/a b"))
        #expect(try DBusBusAddress(parsing: "unix:abstract=/tmp/dbus-X") == .abstract("/tmp/dbus-X"))
        #expect(throws: DBusConnectionError.self) { try DBusBusAddress(parsing: "tcp:host=localhost,port=1") }
        #expect(throws: DBusConnectionError.self) { try DBusBusAddress(parsing: "unix:path=/a%2") }
        #expect(DBusBusAddress.systemBus(environment: [:]) == DBusBusAddress.defaultSystemBus)
        #expect(DBusBusAddress.systemBus(environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/x"]) == "unix:path=/x")
    }
}

