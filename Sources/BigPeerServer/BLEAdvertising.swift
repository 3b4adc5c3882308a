import BLEDiscovery
import Foundation
import Logging
import Sockets
import Synchronization

/// `--ble`: how phones find the node. Registers with BlueZ, over the D-Bus system bus, an LE
/// advertisement with the BigPeer service UUID and the listener's PSM in its service data, and the
/// GATT PSM characteristic (`BLEAdvertiser`; docs/PROTOCOL.md §2.2), and unregisters them on
/// `stop`. Any failure to start (no bus, no `org.bluez`, an adapter that refuses) is one warning,
/// "BLE unavailable: …", and the node runs on without advertising; the channel still listens.
/// When BlueZ leaves the bus, or the bus closes our connection, that is said once and the node
/// runs on unadvertised (no retry: BlueZ's own restart drops every registration).
///
/// **Threading.** The D-Bus connection runs on the loop it is given (the BLE listener's); BlueZ's
/// calls into our objects and the signals run there and only log. `state` is shared under a mutex.
final class BLEAdvertising: Sendable {
    let psm: UInt16
    private let connection: DBusConnection
    private let advertiser: BLEAdvertiser
    private let logger: Logger
    private enum State { case advertising, stopping, ended }
    private let state = Mutex(State.advertising)

    private init(psm: UInt16, connection: DBusConnection, advertiser: BLEAdvertiser, logger: Logger) {
        self.psm = psm
        self.connection = connection
        self.advertiser = advertiser
        self.logger = logger
    }

    /// Advertises `listenerPSM` (or the stand-in's configured PSM) as `deviceName` on the
    /// configured adapter; nil when advertising is off, there is no PSM, or BLE is unavailable.
    static func startIfAvailable(_ configuration: BLEConfiguration, listenerPSM: UInt16?, deviceName: String, loop: EventLoop,
                                 logger: Logger) async -> BLEAdvertising? {
        guard configuration.advertise, let psm = listenerPSM ?? configuration.standInPSM else { return nil }
        let environment = configuration.systemBusAddress.map { ["DBUS_SYSTEM_BUS_ADDRESS": $0] } ?? ProcessInfo.processInfo.environment
        var advertiserConfiguration = BLEAdvertiser.Configuration(psm: psm, localName: deviceName)
        advertiserConfiguration.adapter = configuration.adapter
        let connection: DBusConnection
        let advertiser: BLEAdvertiser
        do throws(BLEUnavailable) {
            connection = try await DBusConnection.systemBus(environment: environment, loop: loop, logger: logger)
            do {
                // Before registering: BlueZ leaving while we register is then seen too.
                try await connection.addMatch(BlueZ.ownerChangedRule)
            } catch {
                await connection.close()
                throw BLEUnavailable("cannot watch BlueZ on the bus: \(error)")
            }
            do { advertiser = try await BLEAdvertiser.start(connection: connection, configuration: advertiserConfiguration, logger: logger) } catch {
                await connection.close()
                throw error
            }
        } catch {
            logger.warning("\(error)", metadata: ["adapter": "\(configuration.adapter)"])
            return nil
        }
        let advertising = BLEAdvertising(psm: psm, connection: connection, advertiser: advertiser, logger: logger)
        await connection.onSignal { [weak advertising] signal in
            guard BlueZ.leftTheBus(signal) else { return }
            advertising?.ended("BlueZ (org.bluez) left the system bus")
        }
        await connection.onClose { [weak advertising] reason in advertising?.ended("the D-Bus connection closed (\(reason))") }
        return advertising
    }

    /// The PSM advertised now; nil once advertising ended or stopped.
    var advertisedPSM: UInt16? { state.withLock { $0 == .advertising } ? psm : nil }

    /// Said once, whichever comes first; nothing after `stop`.
    private func ended(_ why: String) {
        let first = state.withLock { s in
            guard s == .advertising else { return false }
            s = .ended
            return true
        }
        if first { logger.warning("BLE advertising ended: \(why); the node runs on without it", metadata: ["adapter": "\(advertiser.configuration.adapter)"]) }
    }

    /// Unregisters the advertisement and the GATT application, and closes the connection.
    func stop() async {
        state.withLock { $0 = .stopping }
        await advertiser.stop()
        await connection.close()
    }
}
