// Advertising, GATT registration and scanning against the BlueZ stand-in (fake_bluez.py, written
// with libdbus's Python binding: an implementation independent of ours) on a private bus. What
// the stand-in read back from us over D-Bus is what BlueZ would read.

import BigPeerTestSupport
import DBus
import Logging
import Sockets
import Testing
@testable import BLEDiscovery

@Suite("BlueZ stand-in", .enabled(if: StandIn.missing == nil, "\(StandIn.missing ?? "")"))
struct BlueZStandInTests {
    let logger = Logger(label: "test")

    @Test func advertiserRegistersWhatBlueZReadsBack_andUnregistersOnStop() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        let advertiser = try await BLEAdvertiser.start(connection: connection, configuration: .init(psm: 0x0081, localName: "ship-node"), logger: logger)
        #expect(advertiser.form == .full)

        let report = try await bus.report(connection)
        let ads = try #require(report["advertisements"] as? [String: [String: Any]])
        let ad = try #require(ads[BlueZRegistration.advertisementPath])
        #expect(ad["Type"] as? String == "peripheral")
        #expect(ad["ServiceUUIDs"] as? [String] == [BigPeerBLE.serviceUUID])
        #expect(ad["LocalName"] as? String == "ship-node")
        #expect((ad["ServiceData"] as? [String: [Int]])?[BigPeerBLE.serviceUUID] == [0x81, 0x00])

        let apps = try #require(report["applications"] as? [String: [String: Any]])
        let app = try #require(apps[BlueZRegistration.applicationPath])
        let objects = try #require(app["objects"] as? [String: [String: [String: Any]]])
        #expect(objects.keys.sorted() == [BlueZRegistration.servicePath, BlueZRegistration.characteristicPath].sorted())
        let service = try #require(objects[BlueZRegistration.servicePath]?[BlueZ.gattService])
        #expect(service["UUID"] as? String == BigPeerBLE.serviceUUID)
        #expect(service["Primary"] as? Bool == true)
        let characteristic = try #require(objects[BlueZRegistration.characteristicPath]?[BlueZ.gattCharacteristic])
        #expect(characteristic["UUID"] as? String == BigPeerBLE.psmCharacteristicUUID)
        #expect(characteristic["Flags"] as? [String] == ["read"])
        #expect(characteristic["Service"] as? String == BlueZRegistration.servicePath)
        #expect((app["reads"] as? [String: [Int]])?[BlueZRegistration.characteristicPath] == [0x81, 0x00])

        await advertiser.stop()
        let after = try await bus.report(connection)
        #expect(after["unregistered_advertisements"] as? [String] == [BlueZRegistration.advertisementPath])
        #expect(after["unregistered_applications"] as? [String] == [BlueZRegistration.applicationPath])
        #expect((after["errors"] as? [String]) == [])
        // Nothing is exported any more: BlueZ reading again finds no object.
        await #expect(throws: DBusConnectionError.self) {
            _ = try await connection.call(connection.uniqueName, BlueZRegistration.advertisementPath, DBusStandardInterface.properties, "GetAll",
                                          [.string(BlueZ.advertisement)])
        }
        await connection.close()
        await bus.stop()
    }

    @Test func legacyAdvertisingOnly_fallsBackToServiceDataAlone() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "SetLegacyOnly", [.boolean(true)])
        let advertiser = try await BLEAdvertiser.start(connection: connection, configuration: .init(psm: 0x00C3, localName: "n"), logger: logger)
        #expect(advertiser.form == .compact)
        let ads = try #require(try await bus.report(connection)["advertisements"] as? [String: [String: Any]])
        let ad = try #require(ads[BlueZRegistration.advertisementPath])
        #expect(ad["ServiceUUIDs"] == nil)
        #expect((ad["ServiceData"] as? [String: [Int]])?[BigPeerBLE.serviceUUID] == [0xC3, 0x00])
        await advertiser.stop()
        await connection.close()
        await bus.stop()
    }

    @Test func finderTurnsADeviceWithOurServiceDataIntoAddressAndPSM() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        // One device BlueZ knew before the scan, one that appears during it, one that is not ours.
        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "AddDevice",
                                      [.string("/org/bluez/hci0/dev_01"), .string("C0:00:00:00:00:01"), .string("random"),
                                       .string(BigPeerBLE.serviceUUID), .bytes([0x80, 0x00])])
        let events = MutexBox<[BLEFinderEvent]>([])
        let finder = try await BLENodeFinder.start(connection: connection) { event in events.withLock { $0.append(event) } }
        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "AddDevice",
                                      [.string("/org/bluez/hci0/dev_02"), .string("C0:00:00:00:00:02"), .string("public"),
                                       .string("0000180f-0000-1000-8000-00805f9b34fb"), .bytes([0x64])])
        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "AddDevice",
                                      [.string("/org/bluez/hci0/dev_03"), .string("C0:00:00:00:00:03"), .string("public"),
                                       .string(BigPeerBLE.serviceUUID), .bytes([0xF1, 0x00])])
        #expect(await eventually { events.withLock { $0.count } >= 2 }, "both nodes found")
        let found = events.withLock { $0 }
        #expect(found == [
            .found(BLEPeer(devicePath: "/org/bluez/hci0/dev_01", address: "C0:00:00:00:00:01", addressType: "random", psm: 0x80, name: "node")),
            .found(BLEPeer(devicePath: "/org/bluez/hci0/dev_03", address: "C0:00:00:00:00:03", addressType: "public", psm: 0xF1, name: "node")),
        ])
        let report = try await bus.report(connection)
        #expect(report["discovering"] as? Bool == true)
        let filter = try #require(report["discovery_filter"] as? [String: Any])
        #expect(filter["Transport"] as? String == "le")
        #expect(filter["UUIDs"] as? [String] == [BigPeerBLE.serviceUUID])

        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "RemoveDevice", [.string("/org/bluez/hci0/dev_03")])
        #expect(await eventually { events.withLock { $0.last } == .lost(devicePath: "/org/bluez/hci0/dev_03") }, "the removed node is lost")
        await finder.stop()
        #expect(try await bus.report(connection)["discovering"] as? Bool == false)
        await connection.close()
        await bus.stop()
    }

    @Test func noBlueZOnTheBus_isOneBLEUnavailable() async throws {
        let bus = try await PrivateBus(withBlueZ: false)
        let connection = try await bus.connect()
        await #expect(throws: BLEUnavailable("BlueZ (org.bluez) is not on the system bus")) {
            _ = try await BLEAdvertiser.start(connection: connection, configuration: .init(psm: 0x81, localName: "n"), logger: logger)
        }
        await #expect(throws: BLEUnavailable.self) { _ = try await BLENodeFinder.start(connection: connection) { _ in } }
        await connection.close()
        await bus.stop()
    }

    @Test func noBusAtAll_isOneBLEUnavailable() async throws {
        let dir = try TemporaryDirectory("nobus")
        let loops = try EventLoopGroup(threads: 1)
        do {
            _ = try await DBusConnection.systemBus(environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(dir.path)/none"], loop: loops.loops[0], logger: logger)
            Issue.record("connected to a bus that does not exist")
        } catch {
            #expect(error.description.hasPrefix("BLE unavailable: no D-Bus system bus"))
        }
        loops.shutdown()
    }
}
