import ArgumentParser
import BigPeerServer
import Sockets

/// `bigpeer serve --ble ...`: a local node's BLE side (docs/LOCAL-NODE.md, "BLE"). Where there is
/// no Bluetooth the server says "BLE unavailable: …" once and serves everything else.
struct BLEOptions: ParsableArguments {
    @Flag(name: .customLong("ble"), help: "Accept BLE L2CAP peer links (the sync protocol in L2CAP SDUs, docs/PROTOCOL.md §2.1) on a dynamic PSM, advertised with the GATT PSM characteristic through BlueZ (§2.2). Without Bluetooth or BlueZ: one \"BLE unavailable\" warning, and the node runs on.")
    var enabled = false
    @Option(name: .customLong("ble-adapter"), help: "The Bluetooth adapter BLE advertising runs on (the channel listens on every adapter).")
    var adapter = "hci0"

    func validate() throws {
        if !enabled && adapter != "hci0" { throw ValidationError("--ble-adapter needs --ble") }
        guard Self.isAdapterName(adapter) else { throw ValidationError("--ble-adapter must be hciN") }
    }

    /// `hciN`: BlueZ's object name for an adapter (`/org/bluez/hciN`).
    static func isAdapterName(_ name: String) -> Bool { name.hasPrefix("hci") && UInt(name.dropFirst(3)) != nil }

    /// The configuration, or nil without `--ble`.
    func configuration() -> BLEConfiguration? {
        guard enabled else { return nil }
        var c = BLEConfiguration()
        c.adapter = adapter
        return c
    }
}
