// Scans for BigPeer nodes through BlueZ: a discovery filter for LE and our service UUID,
// StartDiscovery, the devices BlueZ already knows, then its signals, all fed to a `BLEPeerTable`.
// When bluetoothd leaves the bus every node is lost; when it returns the scan starts again.

import DBus
import Logging
import Sockets

public final class BLENodeFinder: Sendable {
    public let connection: DBusConnection
    public let adapter: String
    let table: LoopBound<Box>

    final class Box {
        var table: BLEPeerTable
        init(_ table: BLEPeerTable) { self.table = table }
    }

    private init(connection: DBusConnection, adapter: String, table: LoopBound<Box>) {
        self.connection = connection
        self.adapter = adapter
        self.table = table
    }

    /// Starts discovery on `adapter`; `onEvent` runs on the connection's loop.
    public static func start(connection: DBusConnection, adapter: String = "hci0",
                             onEvent: @escaping @Sendable (BLEFinderEvent) -> Void) async throws(BLEUnavailable) -> BLENodeFinder {
        try await BLEAdvertiser.requireBlueZ(connection)
        let adapterPath = BlueZ.adapterPath(adapter)
        let loop = connection.core.loop
        let box: LoopBound<Box>
        do { box = try await loop.submit { LoopBound(Box(BLEPeerTable(adapterPath: adapterPath)), loop: loop) } } catch {
            throw BLEUnavailable("\(error)")
        }
        let deliver: @Sendable ([BLEFinderEvent]) -> Void = { events in events.forEach(onEvent) }
        await connection.onSignal { signal in
            switch BlueZ.ownerChange(signal) {
            case .left?:
                deliver(box.value.table.forgetAll())
            case .arrived?:
                // A new bluetoothd knows nothing of our filter or discovery session.
                Task {
                    do { try await scan(connection, adapterPath: adapterPath, table: box, deliver: deliver) } catch {
                        let core = connection.core
                        core.loop.execute { core.value.logger.warning("BLE: scanning did not start again", metadata: ["error": "\(error)"]) }
                    }
                }
            case nil:
                deliver(box.value.table.handle(signal: signal))
            }
        }
        do {
            try await connection.addMatch("type='signal',sender='\(BlueZ.service)',interface='\(DBusStandardInterface.objectManager)'")
            try await connection.addMatch("type='signal',sender='\(BlueZ.service)',interface='\(DBusStandardInterface.properties)',"
                                          + "member='PropertiesChanged',path_namespace='\(adapterPath)'")
            try await connection.addMatch(BlueZ.ownerChangedRule)
            try await scan(connection, adapterPath: adapterPath, table: box, deliver: deliver)
        } catch {
            throw BLEUnavailable("adapter \(adapterPath) cannot scan: \(error)")
        }
        return BLENodeFinder(connection: connection, adapter: adapter, table: box)
    }

    /// Sets the discovery filter, starts discovery and takes in the devices BlueZ knows already.
    private static func scan(_ connection: DBusConnection, adapterPath: String, table box: LoopBound<Box>,
                             deliver: @escaping @Sendable ([BLEFinderEvent]) -> Void) async throws {
        let filter = DBusValue.properties(["Transport": .string("le"), "UUIDs": .array(.string, [.string(BigPeerBLE.serviceUUID)])])
        _ = try await connection.call(BlueZ.service, adapterPath, BlueZ.adapterInterface, "SetDiscoveryFilter", [filter])
        _ = try await connection.call(BlueZ.service, adapterPath, BlueZ.adapterInterface, "StartDiscovery")
        let known = try await connection.call(BlueZ.service, "/", DBusStandardInterface.objectManager, "GetManagedObjects")
        if let objects = known.body.first {
            try await box.loop.submit { deliver(box.value.table.managedObjects(objects)) }
        }
    }

    /// The nodes seen so far.
    public func peers() async -> [BLEPeer] {
        let table = self.table
        return (try? await table.loop.submit { Array(table.value.table.peers.values) }) ?? []
    }

    public func stop() async {
        _ = try? await connection.call(BlueZ.service, BlueZ.adapterPath(adapter), BlueZ.adapterInterface, "StopDiscovery")
    }
}
