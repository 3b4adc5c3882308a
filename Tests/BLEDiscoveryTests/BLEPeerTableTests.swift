import DBus
import Testing
@testable import BLEDiscovery

@Suite("BLE peer table")
struct BLEPeerTableTests {
    static let adapter = "/org/bluez/hci0"

    static func device(address: String = "C0:FF:EE:00:00:01", serviceData: [String: [UInt8]]?, name: String? = nil) -> [String: DBusValue] {
        var props: [String: DBusValue] = ["Address": .string(address), "AddressType": .string("random")]
        if let serviceData { props["ServiceData"] = .properties(serviceData.mapValues { .bytes($0) }) }
        if let name { props["Name"] = .string(name) }
        return props
    }

    static func added(_ path: String, _ props: [String: DBusValue]) -> DBusMessage {
        .signal(path: "/", interface: DBusStandardInterface.objectManager, member: "InterfacesAdded", body: [
            .objectPath(path),
            .dictionary(key: .string, value: .array(.dictEntry(.string, .variant)), [(.string(BlueZ.deviceInterface), .properties(props))]),
        ])
    }

    static func changed(_ path: String, _ props: [String: DBusValue]) -> DBusMessage {
        .signal(path: path, interface: DBusStandardInterface.properties, member: "PropertiesChanged",
                body: [.string(BlueZ.deviceInterface), .properties(props), .array(.string, [])])
    }

    @Test func aDeviceWithOurServiceData_isANode() {
        var table = BLEPeerTable(adapterPath: Self.adapter)
        let events = table.handle(signal: Self.added("\(Self.adapter)/dev_1", Self.device(serviceData: [BigPeerBLE.serviceUUID: [0x85, 0x00]], name: "n1")))
        #expect(events == [.found(BLEPeer(devicePath: "\(Self.adapter)/dev_1", address: "C0:FF:EE:00:00:01", addressType: "random", psm: 0x85, name: "n1"))])
    }

    @Test func serviceDataArrivingLater_andChanging() {
        var table = BLEPeerTable(adapterPath: Self.adapter)
        let path = "\(Self.adapter)/dev_1"
        #expect(table.handle(signal: Self.added(path, Self.device(serviceData: nil))) == [])
        let found = table.handle(signal: Self.changed(path, ["ServiceData": .properties([BigPeerBLE.serviceUUID.uppercased(): .bytes([0x90, 0])])]))
        #expect(found.count == 1 && table.peers[path]?.psm == 0x90)
        #expect(table.handle(signal: Self.changed(path, ["RSSI": .int16(-60)])) == [])
        let updated = table.handle(signal: Self.changed(path, ["ServiceData": .properties([BigPeerBLE.serviceUUID: .bytes([0x91, 0])])]))
        #expect(updated == [.updated(BLEPeer(devicePath: path, address: "C0:FF:EE:00:00:01", addressType: "random", psm: 0x91, name: nil))])
        // A value that is not two bytes is not a PSM: the node is gone until it is one again.
        #expect(table.handle(signal: Self.changed(path, ["ServiceData": .properties([BigPeerBLE.serviceUUID: .bytes([1, 2, 3])])])) == [.lost(devicePath: path)])
    }

    @Test func othersAreIgnored_andRemovalIsLoss() {
        var table = BLEPeerTable(adapterPath: Self.adapter)
        #expect(table.handle(signal: Self.added("\(Self.adapter)/dev_2", Self.device(serviceData: ["0000180f-0000-1000-8000-00805f9b34fb": [100]]))) == [])
        #expect(table.handle(signal: Self.added("/org/bluez/hci1/dev_3", Self.device(serviceData: [BigPeerBLE.serviceUUID: [0x80, 0]]))) == [])
        let path = "\(Self.adapter)/dev_4"
        _ = table.handle(signal: Self.added(path, Self.device(serviceData: [BigPeerBLE.serviceUUID: [0x80, 0]])))
        let removed = DBusMessage.signal(path: "/", interface: DBusStandardInterface.objectManager, member: "InterfacesRemoved",
                                         body: [.objectPath(path), .array(.string, [.string(BlueZ.deviceInterface)])])
        #expect(table.handle(signal: removed) == [.lost(devicePath: path)])
        #expect(table.peers.isEmpty)
    }

    @Test func forgetAll_losesEveryNode_andTheDevicesBehindThem() {
        var table = BLEPeerTable(adapterPath: Self.adapter)
        _ = table.handle(signal: Self.added("\(Self.adapter)/dev_2", Self.device(serviceData: [BigPeerBLE.serviceUUID: [0x81, 0]])))
        _ = table.handle(signal: Self.added("\(Self.adapter)/dev_1", Self.device(serviceData: [BigPeerBLE.serviceUUID: [0x80, 0]])))
        _ = table.handle(signal: Self.added("\(Self.adapter)/dev_3", Self.device(serviceData: nil)))
        #expect(table.forgetAll() == [.lost(devicePath: "\(Self.adapter)/dev_1"), .lost(devicePath: "\(Self.adapter)/dev_2")])
        #expect(table.peers.isEmpty)
        // What a device had said before is forgotten too: service data alone is no node without its address.
        #expect(table.handle(signal: Self.changed("\(Self.adapter)/dev_3", ["ServiceData": .properties([BigPeerBLE.serviceUUID: .bytes([0x82, 0])])])) == [])
    }

    @Test func managedObjects_reportKnownNodes() {
        var table = BLEPeerTable(adapterPath: Self.adapter)
        let objects = DBusValue.dictionary(key: .objectPath, value: .array(.dictEntry(.string, .array(.dictEntry(.string, .variant)))), [
            (.objectPath(Self.adapter), .dictionary(key: .string, value: .array(.dictEntry(.string, .variant)),
                                                    [(.string(BlueZ.adapterInterface), .properties(["Powered": .boolean(true)]))])),
            (.objectPath("\(Self.adapter)/dev_5"), .dictionary(key: .string, value: .array(.dictEntry(.string, .variant)),
                                                               [(.string(BlueZ.deviceInterface), .properties(Self.device(serviceData: [BigPeerBLE.serviceUUID: [0xFF, 0]])))])),
        ])
        let events = table.managedObjects(objects)
        #expect(events == [.found(BLEPeer(devicePath: "\(Self.adapter)/dev_5", address: "C0:FF:EE:00:00:01", addressType: "random", psm: 0xFF, name: nil))])
    }
}
