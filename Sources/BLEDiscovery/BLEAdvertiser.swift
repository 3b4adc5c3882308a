// Registers BigPeer's advertisement and GATT application with BlueZ over D-Bus, and removes
// them again on `stop`: how phones find a node's L2CAP PSM without raw HCI or root.
//
//   export advertisement, GATT objects ─▶ LEAdvertisingManager1.RegisterAdvertisement(path, {})
//                                      ─▶ GattManager1.RegisterApplication(app, {})
//   BlueZ then reads them back: GetAll(LEAdvertisement1), GetManagedObjects(app), ReadValue.

import DBus
import Logging
import Sockets

public final class BLEAdvertiser: Sendable {
    public struct Configuration: Sendable {
        /// The adapter's object name (`hci0`: `/org/bluez/hci0`).
        public var adapter = "hci0"
        public var psm: UInt16
        public var localName: String
        public init(psm: UInt16, localName: String) {
            self.psm = psm
            self.localName = localName
        }
    }

    public let connection: DBusConnection
    public let configuration: Configuration
    /// The advertisement form BlueZ accepted.
    public let form: BlueZRegistration.AdvertisementForm

    private init(connection: DBusConnection, configuration: Configuration, form: BlueZRegistration.AdvertisementForm) {
        self.connection = connection
        self.configuration = configuration
        self.form = form
    }

    /// Exports and registers both; any failure to reach BlueZ or the adapter is one
    /// `BLEUnavailable` (and nothing stays registered).
    public static func start(connection: DBusConnection, configuration: Configuration, logger: Logger) async throws(BLEUnavailable) -> BLEAdvertiser {
        let registration = BlueZRegistration(psm: configuration.psm, localName: configuration.localName)
        let adapter = BlueZ.adapterPath(configuration.adapter)
        try await requireBlueZ(connection)
        let released: @Sendable () -> Void = {
            logger.warning("BLE: BlueZ released our advertisement", metadata: ["adapter": "\(configuration.adapter)"])
        }
        do {
            try await connection.exportObjectManager(at: BlueZRegistration.applicationPath)
            try await connection.export(path: BlueZRegistration.servicePath, interfaces: [registration.gattService])
            try await connection.export(path: BlueZRegistration.characteristicPath, interfaces: [registration.psmCharacteristic])
        } catch {
            throw BLEUnavailable("cannot export the GATT application: \(error)")
        }
        var form = BlueZRegistration.AdvertisementForm.full
        while true {
            do {
                try await connection.export(path: BlueZRegistration.advertisementPath, interfaces: [registration.advertisement(form, onRelease: released)])
                _ = try await connection.call(BlueZ.service, adapter, BlueZ.advertisingManager, "RegisterAdvertisement",
                                              [.objectPath(BlueZRegistration.advertisementPath), .properties([:])])
                break
            } catch .errorReply("org.bluez.Error.InvalidLength", _) where form == .full {
                // A legacy 31-byte advertisement cannot hold the UUID list and the service data.
                form = .compact
            } catch {
                await connection.unexport(path: BlueZRegistration.advertisementPath)
                await connection.unexport(path: BlueZRegistration.applicationPath)
                throw BLEUnavailable("adapter \(adapter) refused the advertisement: \(error)")
            }
        }
        do {
            _ = try await connection.call(BlueZ.service, adapter, BlueZ.gattManager, "RegisterApplication",
                                          [.objectPath(BlueZRegistration.applicationPath), .properties([:])])
        } catch {
            _ = try? await connection.call(BlueZ.service, adapter, BlueZ.advertisingManager, "UnregisterAdvertisement",
                                           [.objectPath(BlueZRegistration.advertisementPath)])
            await connection.unexport(path: BlueZRegistration.advertisementPath)
            await connection.unexport(path: BlueZRegistration.applicationPath)
            throw BLEUnavailable("adapter \(adapter) refused the GATT application: \(error)")
        }
        logger.info("BLE: advertising", metadata: ["adapter": "\(configuration.adapter)", "psm": "\(configuration.psm)", "form": "\(form)"])
        return BLEAdvertiser(connection: connection, configuration: configuration, form: form)
    }

    /// Unregisters both (BlueZ may already have dropped them: errors are ignored) and stops exporting.
    public func stop() async {
        let adapter = BlueZ.adapterPath(configuration.adapter)
        _ = try? await connection.call(BlueZ.service, adapter, BlueZ.advertisingManager, "UnregisterAdvertisement",
                                       [.objectPath(BlueZRegistration.advertisementPath)])
        _ = try? await connection.call(BlueZ.service, adapter, BlueZ.gattManager, "UnregisterApplication",
                                       [.objectPath(BlueZRegistration.applicationPath)])
        await connection.unexport(path: BlueZRegistration.advertisementPath)
        await connection.unexport(path: BlueZRegistration.applicationPath)
    }

    /// `org.bluez` must own its name on the bus; without it every call would fail one by one.
    static func requireBlueZ(_ connection: DBusConnection) async throws(BLEUnavailable) {
        let owned: Bool
        do { owned = try await connection.nameHasOwner(BlueZ.service) } catch { throw BLEUnavailable("cannot ask the bus for BlueZ: \(error)") }
        guard owned else { throw BLEUnavailable("BlueZ (org.bluez) is not on the system bus") }
    }
}

extension DBusConnection {
    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` or /run/dbus/system_bus_socket), or `BLEUnavailable`.
    public static func systemBus(environment: [String: String], loop: Sockets.EventLoop, logger: Logger) async throws(BLEUnavailable) -> DBusConnection {
        let address = DBusBusAddress.systemBus(environment: environment)
        do { return try await connect(address: address, loop: loop, logger: logger) } catch {
            throw BLEUnavailable("no D-Bus system bus (\(error))")
        }
    }
}
