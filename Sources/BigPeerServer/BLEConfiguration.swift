import Sockets

/// BLE peer links (`--ble`): L2CAP connection-oriented channels carrying the sync protocol
/// (PROTOCOL.md §2.1; docs/LOCAL-NODE.md "BLE").
public struct BLEConfiguration: Sendable {
    /// The adapter advertising runs on (`--ble-adapter`); the channel itself listens on every
    /// adapter unless `address` names one.
    public var adapter = "hci0"
    /// Where channels are accepted: by default any adapter, LE public address type, PSM 0 (the
    /// kernel picks a dynamic PSM, `BigPeerService.blePSM`). Tests use `.unixStandIn(path:)`.
    public var address: PacketLinkAddress = .l2cap(L2CAPAddress(device: .any, type: .lePublic, psm: 0))
    /// `BT_SECURITY` and the stand-in's MTU.
    public var socket = PacketSocketOptions()
    /// A keepalive goes out after this long without sending; a channel silent for
    /// `supervisionTimeout` is dropped (BLE loss is silence).
    public var keepaliveInterval: Duration = .seconds(5)
    public var supervisionTimeout: Duration = .seconds(20)
    /// Advertise the service UUID and the PSM, and publish the GATT PSM characteristic, through
    /// BlueZ (docs/PROTOCOL.md §2.2). Off: only peers told the address and PSM find the node.
    public var advertise = true
    /// The D-Bus system bus BlueZ is on; nil: `DBUS_SYSTEM_BUS_ADDRESS`, else
    /// /run/dbus/system_bus_socket. Tests give a private bus.
    public var systemBusAddress: String?
    /// The PSM advertised when the listener has none of its own, which is only the AF_UNIX
    /// stand-in: tests of the advertising path on machines without Bluetooth. Without it a
    /// stand-in listener is not advertised.
    public var standInPSM: UInt16?

    public init() {}
}
