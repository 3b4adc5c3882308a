// `bigpeer serve --ble` advertising: an in-process server whose BLE listener is the AF_UNIX
// stand-in (no radio here; the configuration gives the PSM it would have), on a private bus with
// or without the BlueZ stand-in. What the stand-in read back over D-Bus is what BlueZ would read.

import BigPeerServer
import BigPeerTestSupport
import HTTP
import Logging
import ServerTestSupport
import Sockets
import Testing
@testable import BLEDiscovery

@Suite("A node advertised through the BlueZ stand-in", .enabled(if: StandIn.missing == nil, "\(StandIn.missing ?? "")"))
struct NodeAdvertisingTests {
    static let psm: UInt16 = 0x0085

    /// A server with `--ble` on the stand-in, BlueZ looked for on `bus`; `lines` are its log lines.
    static func withNode(on bus: PrivateBus, _ body: (BigPeerService, MutexBox<[String]>) async throws -> Void) async throws {
        let sockets = try TemporaryDirectory("ble")
        try await TestPostgres.withDatabase { db in
            var config = InProcessServer.configuration(db)
            var ble = BLEConfiguration()
            ble.address = .unixStandIn(path: sockets.path + "/node")
            ble.standInPSM = psm
            ble.systemBusAddress = bus.address
            config.ble = ble
            let lines = MutexBox<[String]>([])
            let service = try await BigPeerService.start(config, logger: Logger(label: "test") { _ in RecordingLogHandler(lines: lines) })
            try await afterwards({ await service.stop() }) { try await body(service, lines) }
        }
    }

    /// What the stand-in read back: the advertisement's service data and the characteristic's
    /// ReadValue are the PSM, little-endian.
    static func expectRegistered(_ report: [String: Any]) throws {
        let ad = try #require((report["advertisements"] as? [String: [String: Any]])?[BlueZRegistration.advertisementPath])
        #expect((ad["ServiceData"] as? [String: [Int]])?[BigPeerBLE.serviceUUID] == [0x85, 0x00])
        #expect(ad["ServiceUUIDs"] as? [String] == [BigPeerBLE.serviceUUID])
        #expect((ad["LocalName"] as? String)?.isEmpty == false, "the node's device name")
        let app = try #require((report["applications"] as? [String: [String: Any]])?[BlueZRegistration.applicationPath])
        #expect((app["reads"] as? [String: [Int]])?[BlueZRegistration.characteristicPath] == [0x85, 0x00])
    }

    @Test func theNodeRegistersItsPSM_andUnregistersOnStop() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        try await Self.withNode(on: bus) { service, lines in
            #expect(service.acceptsBLE && service.bleAdvertisedPSM == Self.psm)
            try Self.expectRegistered(try await bus.report(connection))
            #expect(!lines.withLock { $0 }.contains { $0.contains("BLE unavailable") })
        }
        let after = try await bus.report(connection)
        #expect(after["unregistered_advertisements"] as? [String] == [BlueZRegistration.advertisementPath])
        #expect(after["unregistered_applications"] as? [String] == [BlueZRegistration.applicationPath])
        #expect((after["advertisements"] as? [String: Any])?.isEmpty == true)
        #expect((after["errors"] as? [String]) == [])
        await connection.close()
        await bus.stop()
    }

    @Test func noBlueZOnTheBus_isOneWarning_andTheNodeServesOn() async throws {
        let bus = try await PrivateBus(withBlueZ: false)
        try await Self.withNode(on: bus) { service, lines in
            #expect(service.acceptsBLE, "the channel still listens")
            #expect(service.bleAdvertisedPSM == nil)
            let warnings = lines.withLock { $0 }.filter { $0.contains("BLE unavailable") }
            #expect(warnings == ["warning BLE unavailable: BlueZ (org.bluez) is not on the system bus"])
            let http = try HTTPClient()
            let health = try await afterwards({ await http.shutdown() }) { try await RESTClient(http: http, port: service.port).get("/healthz") }
            #expect(health.status == 200)
        }
        await bus.stop()
    }

    /// bluetoothd restarting drops every registration: said once, and registered again when it is back.
    @Test func bluetoothdRestarting_pausesAdvertising_andRegistersAgain() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        let connection = try await bus.connect()
        try await Self.withNode(on: bus) { service, lines in
            #expect(service.bleAdvertisedPSM == Self.psm)
            await bus.killBlueZ()
            let paused = { lines.withLock { $0 }.filter { $0.contains("BLE advertising paused") } }
            #expect(await eventually { !paused().isEmpty })
            #expect(service.bleAdvertisedPSM == nil)
            try await bus.startBlueZ()
            #expect(await eventually { service.bleAdvertisedPSM == Self.psm }, "registered again")
            // The new bluetoothd read it all back, as the first one did.
            try Self.expectRegistered(try await bus.report(connection))
            #expect(paused() == ["warning BLE advertising paused: BlueZ (org.bluez) left the system bus; advertising again when it returns"])
            #expect(!lines.withLock { $0 }.contains { $0.contains("BLE unavailable") })
        }
        #expect(try await bus.report(connection)["unregistered_advertisements"] as? [String] == [BlueZRegistration.advertisementPath])
        await connection.close()
        await bus.stop()
    }

    /// The bus closing our connection ends advertising: said once, and the node runs on.
    @Test func theBusGoingAway_endsAdvertising_saidOnce() async throws {
        let bus = try await PrivateBus(withBlueZ: true)
        try await Self.withNode(on: bus) { service, lines in
            #expect(service.bleAdvertisedPSM == Self.psm)
            await bus.killDaemon()
            let ended = { lines.withLock { $0 }.filter { $0.contains("BLE advertising") } }
            #expect(await eventually { !ended().isEmpty })
            #expect(service.bleAdvertisedPSM == nil)
            #expect(ended().count == 1 && ended().first?.hasPrefix("warning BLE advertising ended: the D-Bus connection closed") == true, "\(ended())")
            #expect(service.acceptsBLE)
        }
        await bus.stop()
    }
}

/// Keeps every log line as "level message".
struct RecordingLogHandler: LogHandler {
    let lines: MutexBox<[String]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lines.withLock { $0.append("\(event.level) \(event.message)") }
    }
}
