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

    public init() {}
}
