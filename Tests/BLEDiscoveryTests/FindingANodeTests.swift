// `bigpeer peer --ble` without `--url`, up to the dial: the scanner against the BlueZ stand-in,
// its events fed to the chooser as `PeerBLELink` feeds them.

import BigPeerTestSupport
import DBus
import Testing
@testable import BLEDiscovery

@Suite("Finding a node through the BlueZ stand-in", .enabled(if: StandIn.missing == nil, "\(StandIn.missing ?? "")"))
struct FindingANodeTests {
    static func addDevice(_ connection: DBusConnection, _ n: Int, type: String, name: String, psm: UInt16) async throws {
        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "AddNamedDevice",
                                      [.string("/org/bluez/hci0/dev_0\(n)"), .string("C0:00:00:00:00:0\(n)"), .string(type), .string(name),
                                       .string(BigPeerBLE.serviceUUID), .bytes(BigPeerBLE.psmBytes(psm))])
    }

    @Test func theChooserDialsTheFirstMatchingNode_andMovesWhenItIsLost() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        let chooser = MutexBox(BLENodeChooser(name: "ship"))
        let dials = MutexBox<[BLENodeChooser.Action]>([])
        // The link never comes up here: a lost node is replaced at once.
        let finder = try await BLENodeFinder.start(connection: connection) { event in
            guard let action = chooser.withLock({ $0.handle(event, linkUp: false) }) else { return }
            dials.withLock { $0.append(action) }
        }
        try await Self.addDevice(connection, 1, type: "random", name: "other", psm: 0x80)
        try await Self.addDevice(connection, 2, type: "public", name: "ship", psm: 0x81)
        try await Self.addDevice(connection, 3, type: "random", name: "ship", psm: 0x82)
        #expect(await eventually { chooser.withLock { $0.candidates.count } == 2 }, "both ships seen")
        let ship2 = BLEPeer(devicePath: "/org/bluez/hci0/dev_02", address: "C0:00:00:00:00:02", addressType: "public", psm: 0x81, name: "ship")
        let ship3 = BLEPeer(devicePath: "/org/bluez/hci0/dev_03", address: "C0:00:00:00:00:03", addressType: "random", psm: 0x82, name: "ship")
        #expect(dials.withLock { $0 } == [.dial(ship2, url: "l2cap://C0:00:00:00:00:02/129")])

        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "RemoveDevice", [.string(ship2.devicePath)])
        #expect(await eventually { dials.withLock { $0.count } == 2 })
        #expect(dials.withLock { $0.last } == .dial(ship3, url: "l2cap://C0:00:00:00:00:03/130?random"))

        _ = try await connection.call("org.bluez", "/org/bigpeer/fake", "org.bigpeer.FakeBlueZ", "RemoveDevice", [.string(ship3.devicePath)])
        #expect(await eventually { dials.withLock { $0.count } == 3 })
        #expect(dials.withLock { $0.last } == .hangUp, "no ship left; the other node is never dialled")
        await finder.stop()
        await connection.close()
        await bus.stop()
    }

    /// bluetoothd restarting: every node it reported is lost, and the new one is asked to scan again.
    @Test func bluetoothdRestarting_losesItsNodes_andTheScanStartsAgain() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        let events = MutexBox<[BLEFinderEvent]>([])
        let finder = try await BLENodeFinder.start(connection: connection) { event in events.withLock { $0.append(event) } }
        try await Self.addDevice(connection, 1, type: "public", name: "ship", psm: 0x80)
        #expect(await eventually { events.withLock { $0.count } == 1 })
        await bus.killBlueZ()
        #expect(await eventually { events.withLock { $0.count } == 2 })
        #expect(events.withLock { $0.last } == .lost(devicePath: "/org/bluez/hci0/dev_01"))
        try await bus.startBlueZ()
        #expect(await eventually { (try? await bus.report(connection))?["discovering"] as? Bool == true }, "discovery started on the new bluetoothd")
        let filter = try #require(try await bus.report(connection)["discovery_filter"] as? [String: Any])
        #expect(filter["UUIDs"] as? [String] == [BigPeerBLE.serviceUUID])
        try await Self.addDevice(connection, 2, type: "random", name: "ship", psm: 0x81)
        #expect(await eventually { events.withLock { $0.count } == 3 })
        #expect(events.withLock { $0.last } == .found(BLEPeer(devicePath: "/org/bluez/hci0/dev_02", address: "C0:00:00:00:00:02",
                                                               addressType: "random", psm: 0x81, name: "ship")))
        await finder.stop()
        await connection.close()
        await bus.stop()
    }
}
