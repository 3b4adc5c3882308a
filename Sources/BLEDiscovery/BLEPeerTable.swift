// Which BigPeer nodes BlueZ has seen, from its D-Bus objects and signals, without I/O: a device
// (`org.bluez.Device1`) whose ServiceData holds our service UUID with a two-byte value is a node,
// and that value is its L2CAP PSM.

import DBus

/// A node seen over BLE: where to open the L2CAP channel.
public struct BLEPeer: Equatable, Sendable {
    /// BlueZ's object for the device (`/org/bluez/hci0/dev_AA_BB_…`).
    public var devicePath: String
    public var address: String
    /// `public` or `random` (the LE address type the L2CAP connect needs).
    public var addressType: String
    public var psm: UInt16
    public var name: String?
}

public enum BLEFinderEvent: Equatable, Sendable {
    case found(BLEPeer)
    /// Its PSM, address type or name changed.
    case updated(BLEPeer)
    case lost(devicePath: String)
}

public struct BLEPeerTable: Sendable {
    /// What is known of every device below the adapter, BigPeer or not (a PropertiesChanged
    /// signal may bring the service data later). Bounded: BlueZ itself expires devices.
    private var devices: [String: [String: DBusValue]] = [:]
    public private(set) var peers: [String: BLEPeer] = [:]
    /// Only devices below this adapter path count.
    public let adapterPath: String
    public static let maxDevices = 4096

    public init(adapterPath: String) { self.adapterPath = adapterPath }

    /// The reply of `GetManagedObjects` on BlueZ's root (`a{oa{sa{sv}}}`).
    public mutating func managedObjects(_ value: DBusValue) -> [BLEFinderEvent] {
        var events: [BLEFinderEvent] = []
        for (path, interfaces) in value.dictionaryEntries ?? [] {
            guard let path = path.stringValue, let props = interfaces.stringKeyedDictionary?[BlueZ.deviceInterface] else { continue }
            events += merge(path: path, props.stringKeyedDictionary ?? [:])
        }
        return events
    }

    /// InterfacesAdded / InterfacesRemoved (ObjectManager) and PropertiesChanged signals; others are ignored.
    public mutating func handle(signal: DBusMessage) -> [BLEFinderEvent] {
        switch (signal.interface, signal.member) {
        case (.some(DBusStandardInterface.objectManager), "InterfacesAdded"):
            guard signal.body.count == 2, let path = signal.body[0].stringValue,
                  let props = signal.body[1].stringKeyedDictionary?[BlueZ.deviceInterface]?.stringKeyedDictionary else { return [] }
            return merge(path: path, props)
        case (.some(DBusStandardInterface.objectManager), "InterfacesRemoved"):
            guard signal.body.count == 2, let path = signal.body[0].stringValue,
                  signal.body[1].arrayElements?.contains(.string(BlueZ.deviceInterface)) == true else { return [] }
            devices[path] = nil
            return peers.removeValue(forKey: path) == nil ? [] : [.lost(devicePath: path)]
        case (.some(DBusStandardInterface.properties), "PropertiesChanged"):
            guard let path = signal.path, signal.body.count >= 2, signal.body[0] == .string(BlueZ.deviceInterface),
                  let changed = signal.body[1].stringKeyedDictionary else { return [] }
            return merge(path: path, changed)
        default:
            return []
        }
    }

    /// bluetoothd left the bus: every device it reported is gone with it.
    public mutating func forgetAll() -> [BLEFinderEvent] {
        let lost = peers.keys.sorted().map { BLEFinderEvent.lost(devicePath: $0) }
        devices = [:]
        peers = [:]
        return lost
    }

    private mutating func merge(path: String, _ changed: [String: DBusValue]) -> [BLEFinderEvent] {
        guard path.hasPrefix(adapterPath + "/") else { return [] }
        guard devices[path] != nil || devices.count < Self.maxDevices else { return [] }
        devices[path, default: [:]].merge(changed) { _, new in new }
        let props = devices[path] ?? [:]
        guard let address = props["Address"]?.stringValue,
              let data = props["ServiceData"]?.stringKeyedDictionary,
              let bytes = data.first(where: { $0.key.lowercased() == BigPeerBLE.serviceUUID })?.value.byteArray,
              let psm = BigPeerBLE.psm(from: bytes) else {
            return peers.removeValue(forKey: path) == nil ? [] : [.lost(devicePath: path)]
        }
        let peer = BLEPeer(devicePath: path, address: address, addressType: props["AddressType"]?.stringValue ?? "public", psm: psm,
                           name: props["Name"]?.stringValue ?? props["Alias"]?.stringValue)
        let before = peers.updateValue(peer, forKey: path)
        switch before {
        case nil: return [.found(peer)]
        case peer?: return []
        default: return [.updated(peer)]
        }
    }
}
