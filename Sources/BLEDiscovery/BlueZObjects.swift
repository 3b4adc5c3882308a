// The objects BigPeer exports for BlueZ to read, as values (no I/O): the LE advertisement
// (`org.bluez.LEAdvertisement1`, doc/org.bluez.LEAdvertisement.rst) and the GATT application
// (`org.bluez.GattService1` / `GattCharacteristic1` below an ObjectManager root,
// doc/org.bluez.GattManager.rst).

import DBus

public enum BlueZ {
    public static let service = "org.bluez"
    public static let adapterInterface = "org.bluez.Adapter1"
    public static let deviceInterface = "org.bluez.Device1"
    public static let advertisingManager = "org.bluez.LEAdvertisingManager1"
    public static let advertisement = "org.bluez.LEAdvertisement1"
    public static let gattManager = "org.bluez.GattManager1"
    public static let gattService = "org.bluez.GattService1"
    public static let gattCharacteristic = "org.bluez.GattCharacteristic1"

    public static func adapterPath(_ adapter: String) -> String { "/org/bluez/" + adapter }

    /// The bus's `NameOwnerChanged` signals for `org.bluez` (bluetoothd starting or exiting).
    public static let ownerChangedRule =
        "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(service)'"

    public enum OwnerChange: Equatable, Sendable {
        /// bluetoothd left the bus: every registration it held is gone with it.
        case left
        /// bluetoothd (re)started: it knows nothing of what was registered before.
        case arrived
    }

    /// What a `NameOwnerChanged(org.bluez, old, new)` signal says; nil for any other message. Only
    /// the bus itself sends it (the bus stamps every message's sender, so no client can forge it).
    public static func ownerChange(_ signal: DBusMessage) -> OwnerChange? {
        guard signal.sender == "org.freedesktop.DBus", signal.interface == "org.freedesktop.DBus", signal.member == "NameOwnerChanged",
              signal.body.count == 3, signal.body[0] == .string(service),
              let old = signal.body[1].stringValue, let new = signal.body[2].stringValue else { return nil }
        if new.isEmpty { return .left }
        return old.isEmpty ? .arrived : nil
    }
}

/// What BigPeer registers with BlueZ for one PSM.
public struct BlueZRegistration: Sendable {
    public static let advertisementPath = "/org/bigpeer/ble/advertisement0"
    public static let applicationPath = "/org/bigpeer/ble/app"
    public static let servicePath = applicationPath + "/service0"
    public static let characteristicPath = servicePath + "/char0"

    /// `full`: service UUID list, service data and local name (needs extended advertising or a
    /// controller that places the name in the scan response); `compact`: service data alone,
    /// 23 bytes with the flags, which fits a legacy 31-byte advertisement.
    public enum AdvertisementForm: Sendable { case full, compact }

    public var psm: UInt16
    public var localName: String

    public init(psm: UInt16, localName: String) {
        self.psm = psm
        self.localName = localName
    }

    /// `onRelease` runs when BlueZ drops the advertisement on its own (`Release`).
    public func advertisement(_ form: AdvertisementForm, onRelease: @escaping @Sendable () -> Void) -> DBusInterface {
        var properties: [String: DBusValue] = [
            "Type": .string("peripheral"),
            "ServiceData": .dictionary(key: .string, value: .variant, [(.string(BigPeerBLE.serviceUUID), .variant(.bytes(BigPeerBLE.psmBytes(psm))))]),
        ]
        if form == .full {
            properties["ServiceUUIDs"] = .array(.string, [.string(BigPeerBLE.serviceUUID)])
            properties["LocalName"] = .string(localName)
        }
        return DBusInterface(name: BlueZ.advertisement, properties: properties, methods: [
            "Release": { _ in
                onRelease()
                return .success([])
            },
        ])
    }

    public var gattService: DBusInterface {
        DBusInterface(name: BlueZ.gattService, properties: [
            "UUID": .string(BigPeerBLE.serviceUUID),
            "Primary": .boolean(true),
        ])
    }

    public var psmCharacteristic: DBusInterface {
        let value = BigPeerBLE.psmBytes(psm)
        return DBusInterface(name: BlueZ.gattCharacteristic, properties: [
            "UUID": .string(BigPeerBLE.psmCharacteristicUUID),
            "Service": .objectPath(Self.servicePath),
            "Flags": .array(.string, [.string("read")]),
        ], methods: [
            // ReadValue(a{sv} options) → ay. The value is two bytes, so an "offset" option past
            // the start returns what remains (BlueZ passes it for long reads).
            "ReadValue": { call in
                let offset = call.body.first?.stringKeyedDictionary?["offset"].flatMap { v -> Int? in
                    if case .uint16(let o) = v { return Int(o) }
                    return nil
                } ?? 0
                guard offset <= value.count else {
                    return .failure(DBusMethodError(name: "org.bluez.Error.InvalidOffset", message: "offset \(offset) past the value"))
                }
                return .success([.bytes(Array(value[offset...]))])
            },
        ])
    }
}
