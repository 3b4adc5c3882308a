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
/// When bluetoothd leaves the bus (its registrations go with it) that is said once, and the node
/// registers again when it returns (its `NameOwnerChanged`: no polling). When the bus closes our
/// connection that is said once, and the node runs on unadvertised.
///
/// **Threading.** The D-Bus connection runs on the loop it is given (the BLE listener's); BlueZ's
/// calls into our objects and the signals run there. Registering again is a task of its own.
/// `state` is a leaf mutex.
final class BLEAdvertising: Sendable {
    let psm: UInt16
    private let connection: DBusConnection
    private let configuration: BLEAdvertiser.Configuration
    private let logger: Logger
    private enum State {
        case advertising(BLEAdvertiser)
        /// bluetoothd left the bus; `registering` once it is back, until BlueZ answers.
        case awaitingBlueZ, registering
        /// The bus connection closed: nothing more to do.
        case closed
        case stopping
    }
    private let state: Mutex<State>

    private init(psm: UInt16, connection: DBusConnection, configuration: BLEAdvertiser.Configuration, advertiser: BLEAdvertiser, logger: Logger) {
        self.psm = psm
        self.connection = connection
        self.configuration = configuration
        self.state = Mutex(.advertising(advertiser))
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
        let advertising = BLEAdvertising(psm: psm, connection: connection, configuration: advertiserConfiguration, advertiser: advertiser, logger: logger)
        await connection.onSignal { [weak advertising] signal in
            switch BlueZ.ownerChange(signal) {
            case .left?: advertising?.blueZLeft()
            case .arrived?: advertising?.blueZArrived()
            case nil: break
            }
        }
        await connection.onClose { [weak advertising] reason in advertising?.closed(reason) }
        return advertising
    }

    /// The PSM advertised now; nil while BlueZ is away, and once advertising ended or stopped.
    var advertisedPSM: UInt16? {
        state.withLock { s in
            if case .advertising = s { return psm }
            return nil
        }
    }

    private func blueZLeft() {
        let said = state.withLock { s -> Bool in
            switch s {
            case .advertising: s = .awaitingBlueZ; return true
            case .registering: s = .awaitingBlueZ; return false
            case .awaitingBlueZ, .closed, .stopping: return false
            }
        }
        if said { logger.warning("BLE advertising paused: BlueZ (org.bluez) left the system bus; advertising again when it returns", metadata: metadata) }
    }

    private func blueZArrived() {
        let register = state.withLock { s -> Bool in
            guard case .awaitingBlueZ = s else { return false }
            s = .registering
            return true
        }
        guard register else { return }
        Task { await self.registerAgain() }
    }

    private func registerAgain() async {
        do {
            let advertiser = try await BLEAdvertiser.start(connection: connection, configuration: configuration, logger: logger)
            let kept = state.withLock { s -> Bool in
                guard case .registering = s else { return false }
                s = .advertising(advertiser)
                return true
            }
            // Stopped, or BlueZ left again meanwhile (it comes back with nothing registered).
            if !kept { await advertiser.stop() }
        } catch {
            let waiting = state.withLock { s -> Bool in
                guard case .registering = s else { return false }
                s = .awaitingBlueZ
                return true
            }
            if waiting { logger.warning("\(error)", metadata: metadata) }
        }
    }

    private func closed(_ reason: String) {
        let said = state.withLock { s -> Bool in
            if case .stopping = s { return false }
            s = .closed
            return true
        }
        if said { logger.warning("BLE advertising ended: the D-Bus connection closed (\(reason)); the node runs on without it", metadata: metadata) }
    }

    private var metadata: Logger.Metadata { ["adapter": "\(configuration.adapter)"] }

    /// Unregisters the advertisement and the GATT application, and closes the connection.
    func stop() async {
        let advertiser = state.withLock { s -> BLEAdvertiser? in
            defer { s = .stopping }
            if case .advertising(let a) = s { return a }
            return nil
        }
        await advertiser?.stop()
        await connection.close()
    }
}
