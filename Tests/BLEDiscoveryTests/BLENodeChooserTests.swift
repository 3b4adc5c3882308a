import SyncPeer
import Sockets
import Testing
@testable import BLEDiscovery

@Suite("BLE node chooser")
struct BLENodeChooserTests {
    static func node(_ n: Int, psm: UInt16 = 0x81, type: String = "public", name: String? = "node") -> BLEPeer {
        BLEPeer(devicePath: "/org/bluez/hci0/dev_\(n)", address: "C0:00:00:00:00:0\(n)", addressType: type, psm: psm, name: name)
    }

    @Test func url_isL2CAPWithRandomForARandomAddress_andParsesBack() throws {
        #expect(BLENodeChooser.url(for: Self.node(1)) == "l2cap://C0:00:00:00:00:01/129")
        let random = try #require(BLENodeChooser.url(for: Self.node(2, psm: 0x1001, type: "random")))
        #expect(random == "l2cap://C0:00:00:00:00:02/4097?random")
        let parsed = try #require(PacketLinkURL.parse(random))
        #expect(parsed.address == .l2cap(L2CAPAddress(device: try #require(BluetoothAddress("C0:00:00:00:00:02")), type: .leRandom, psm: 4097)))
        // Lower-case from BlueZ is written in the form the URL parser and the logs use.
        var lower = Self.node(3)
        lower.address = "c0:ff:ee:00:00:0a"
        #expect(BLENodeChooser.url(for: lower) == "l2cap://C0:FF:EE:00:00:0A/129")
        lower.address = "not an address"
        #expect(BLENodeChooser.url(for: lower) == nil)
        #expect(BLENodeChooser.url(for: Self.node(4, psm: 0)) == nil)
    }

    @Test func theFirstNodeFound_isDialled_andLaterOnesWait() {
        var chooser = BLENodeChooser(name: nil)
        #expect(chooser.handle(.found(Self.node(1)), linkUp: false) == .dial(Self.node(1), url: "l2cap://C0:00:00:00:00:01/129"))
        #expect(chooser.handle(.found(Self.node(2)), linkUp: false) == nil)
        #expect(chooser.current == Self.node(1))
        #expect(chooser.candidates == [Self.node(1), Self.node(2)])
        #expect(chooser.linkDown() == nil, "a link that is down keeps reconnecting to a node still in range")
    }

    @Test func aNameFilter_skipsOtherNodes_andNodesWithoutAName() {
        var chooser = BLENodeChooser(name: "ship")
        #expect(chooser.handle(.found(Self.node(1, name: "other")), linkUp: false) == nil)
        #expect(chooser.handle(.found(Self.node(2, name: nil)), linkUp: false) == nil)
        #expect(chooser.handle(.found(Self.node(3, name: "ship")), linkUp: false) == .dial(Self.node(3, name: "ship"), url: "l2cap://C0:00:00:00:00:03/129"))
        // A candidate renamed away is no candidate any more.
        #expect(chooser.handle(.updated(Self.node(3, name: "renamed")), linkUp: true) == nil)
        #expect(chooser.candidates.isEmpty)
        #expect(chooser.linkDown() == .hangUp)
    }

    @Test func lostWhileTheLinkIsDown_movesToTheNextNode() {
        var chooser = BLENodeChooser(name: nil)
        _ = chooser.handle(.found(Self.node(1)), linkUp: false)
        _ = chooser.handle(.found(Self.node(2, type: "random")), linkUp: false)
        #expect(chooser.handle(.lost(devicePath: Self.node(1).devicePath), linkUp: false)
                == .dial(Self.node(2, type: "random"), url: "l2cap://C0:00:00:00:00:02/129?random"))
        #expect(chooser.handle(.lost(devicePath: Self.node(2).devicePath), linkUp: false) == .hangUp)
        #expect(chooser.current == nil)
        #expect(chooser.linkDown() == nil, "nothing to dial: wait for the scanner")
        #expect(chooser.handle(.found(Self.node(3)), linkUp: false) == .dial(Self.node(3), url: "l2cap://C0:00:00:00:00:03/129"))
    }

    @Test func lostWhileTheLinkIsUp_keepsTheLinkUntilItGoesDown() {
        var chooser = BLENodeChooser(name: nil)
        _ = chooser.handle(.found(Self.node(1)), linkUp: false)
        _ = chooser.handle(.found(Self.node(2)), linkUp: true)
        #expect(chooser.handle(.lost(devicePath: Self.node(1).devicePath), linkUp: true) == nil)
        #expect(chooser.current == Self.node(1))
        #expect(chooser.linkDown() == .dial(Self.node(2), url: "l2cap://C0:00:00:00:00:02/129"))
        #expect(chooser.linkDown() == nil, "the new node's link is given its time")
    }

    @Test func theLostNodeSeenAgainBeforeTheLinkDrops_isKept() {
        var chooser = BLENodeChooser(name: nil)
        _ = chooser.handle(.found(Self.node(1)), linkUp: false)
        _ = chooser.handle(.found(Self.node(2)), linkUp: true)
        _ = chooser.handle(.lost(devicePath: Self.node(1).devicePath), linkUp: true)
        #expect(chooser.handle(.found(Self.node(1)), linkUp: true) == nil)
        #expect(chooser.linkDown() == nil)
        #expect(chooser.current == Self.node(1))
    }

    @Test func theDialledNodeOnANewPSM_isDialledAgainOnceTheLinkIsDown() {
        var chooser = BLENodeChooser(name: nil)
        _ = chooser.handle(.found(Self.node(1)), linkUp: false)
        _ = chooser.handle(.found(Self.node(2)), linkUp: false)
        // A restarted node listens on a new dynamic PSM; its old link is about to fail.
        #expect(chooser.handle(.updated(Self.node(1, psm: 0x83)), linkUp: true) == nil)
        #expect(chooser.linkDown() == .dial(Self.node(1, psm: 0x83), url: "l2cap://C0:00:00:00:00:01/131"))
        // With the link already down, at once.
        #expect(chooser.handle(.updated(Self.node(1, psm: 0x85)), linkUp: false) == .dial(Self.node(1, psm: 0x85), url: "l2cap://C0:00:00:00:00:01/133"))
        // Another name or the same URL is no reason to dial again.
        #expect(chooser.handle(.updated(Self.node(1, psm: 0x85, name: "node")), linkUp: false) == nil)
    }
}
