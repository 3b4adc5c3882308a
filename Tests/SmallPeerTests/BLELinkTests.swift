import BigPeerServer
import BigPeerTestSupport
import Foundation
import ServerTestSupport
@testable import SmallPeer
import Sockets
import SyncProtocol
import Testing
import Values

/// A small peer and an in-process server over the BLE link (PROTOCOL.md §2.1), with the AF_UNIX
/// SEQPACKET stand-in for the L2CAP channel (no radio here) and, for rates and loss, the
/// `PacketLinkShaper` between them. Everything but the socket family is the real code.
@Suite(.serialized) struct BLELinkTests {
    /// A server accepting BLE links at `<dir>/node`, a key, and a short directory for socket paths
    /// (sun_path holds 107 bytes).
    static func withNode(mtu: Int = 247, keepalive: Duration = .seconds(5), supervision: Duration = .seconds(20), policyFile: String? = nil,
                         _ body: (InProcessServer, String, String) async throws -> Void) async throws {
        let dir = "/tmp/ble-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try await TestPostgres.withDatabase { db in
            let server = try await InProcessServer.start(on: db) { config in
                var ble = BLEConfiguration()
                ble.address = .unixStandIn(path: dir + "/node")
                ble.socket.standInMTU = mtu  // both ends of the stand-in must agree (L2CAP negotiates it)
                ble.keepaliveInterval = keepalive
                ble.supervisionTimeout = supervision
                config.ble = ble
                config.peerPolicyFile = policyFile
            }
            try await afterwards({ await server.stop() }) {
                #expect(server.service.acceptsBLE && server.service.blePSM == nil)
                try await body(server, try await server.newKey(), dir)
            }
        }
    }

    /// `--ble` on a machine without Bluetooth: the node starts, accepts no BLE links, serves the rest.
    @Test func aNodeWithoutBluetoothRunsOnWithoutBLE() async throws {
        guard PacketSockets.bluetoothUnavailable() != nil else { return }  // a machine with Bluetooth: nothing to check
        try await TestPostgres.withDatabase { db in
            let server = try await InProcessServer.start(on: db) { config in config.ble = BLEConfiguration() }
            try await afterwards({ await server.stop() }) {
                #expect(!server.service.acceptsBLE && server.service.blePSM == nil)
                let key = try await server.newKey()
                try await server.rest(key: key).executeOK("INSERT INTO notes DOCUMENTS ({'_id': 'a'})")
            }
        }
    }

    static func ids(_ peer: SmallPeer, _ collection: String) -> Set<String> {
        Set(((try? peer.execute("SELECT * FROM \(collection)").items) ?? []).compactMap { $0["_id"]?.stringValue })
    }

    @Test func aSmallPeerSyncsOverTheStandInLinkBothWays() async throws {
        try await Self.withNode(mtu: 64) { server, key, dir in
            try await server.rest(key: key).executeOK("INSERT INTO notes DOCUMENTS ({'_id': 'from-node'})")
            let peerDir = TempDirectory()
            defer { peerDir.cleanup() }
            let peer = try openPeer(peerDir.path)
            _ = try peer.subscribe("SELECT * FROM notes")
            _ = try peer.execute("INSERT INTO notes DOCUMENTS ({'_id': 'from-peer'})")
            let client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: "seqpacket://\(dir)/node?mtu=64", apiKey: key))
            try await afterwards({ await client.stop() }) {
                #expect(await eventually(within: .seconds(20)) { Self.ids(peer, "notes") == ["from-node", "from-peer"] }, "\(client.status)")
                #expect(await eventually { ((try? await server.rest(key: key).executeOK("SELECT * FROM notes"))?["items"]?.arrayValue?.count) == 2 })
                #expect(peer.presenceGraph.localPeer.connections.contains { $0.type == .bluetooth }, "presence lists the link as Bluetooth")
            }
        }
    }

    /// BLE links pass the node's connection policy like every link: a rule on `"link": "Bluetooth"` refuses them.
    @Test func theConnectionPolicySeesTheLinkAsBluetooth() async throws {
        let files = try TemporaryDirectory("bigpeer-policy")
        let policy = try files.write("policy.json", #"""
            {"version": 1, "default": "allow", "rules": [{"name": "no BLE", "action": "deny", "link": "Bluetooth", "reason": "not over BLE"}]}
            """#)
        try await Self.withNode(policyFile: policy) { server, key, dir in
            let peerDir = TempDirectory()
            defer { peerDir.cleanup() }
            let client = try SyncClient(peer: try openPeer(peerDir.path), configuration: SyncClient.Configuration(url: "seqpacket://\(dir)/node", apiKey: key))
            try await afterwards({ await client.stop() }) {
                #expect(await eventually { client.status.lastError?.contains("(4003)") == true }, "\(client.status)")
                #expect(client.status.lastError?.contains("not over BLE") == true, "\(client.status)")
            }
        }
    }

    /// The measurements of docs/PERFORMANCE.md ("BLE"): bytes and time over a 22 kB/s, 100 ms
    /// link. The bytes of the one-field update are asserted (proportional to the field, not the
    /// document); times are printed, not asserted.
    @Test func shapedLinkInitialSyncAndAOneFieldUpdate() async throws {
        try await Self.withNode { server, key, dir in
            let rest = server.rest(key: key)
            let kilobyte = String(repeating: "x", count: 1000)
            for batch in 0..<10 {
                let docs = (0..<100).map { "({'_id': 'd\(batch * 100 + $0)', 'body': '\(kilobyte)'})" }.joined(separator: ", ")
                try await rest.executeOK("INSERT INTO docs DOCUMENTS \(docs)")
            }
            let shaper = try PacketLinkShaper(path: dir + "/shaped", to: dir + "/node")
            defer { shaper.stop() }
            let peerDir = TempDirectory()
            defer { peerDir.cleanup() }
            let peer = try openPeer(peerDir.path)
            _ = try peer.subscribe("SELECT * FROM docs")
            let started = ContinuousClock.now
            let client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: "seqpacket://\(dir)/shaped", apiKey: key))
            try await afterwards({ await client.stop() }) {
                #expect(await eventually(within: .seconds(600)) { Self.ids(peer, "docs").count == 1000 })
                let initialBytes = shaper.forwardedBytes
                let initialTime = ContinuousClock.now - started
                print("BLE shaped link (22 kB/s, 100 ms): initial sync of 1,000 x 1 KB: \(initialBytes) bytes in \(initialTime)")

                try await rest.executeOK("INSERT INTO docs DOCUMENTS ({'_id': 'big', 'n': 0, 'blob': '\(String(repeating: "y", count: 250_000))'})")
                let beforeBig = shaper.forwardedBytes
                let bigStarted = ContinuousClock.now
                #expect(await eventually(within: .seconds(600)) { Self.ids(peer, "docs").contains("big") })
                let bigBytes = shaper.forwardedBytes - beforeBig
                let bigTime = ContinuousClock.now - bigStarted
                print("BLE shaped link: one new 250 KB document: \(bigBytes) bytes in \(bigTime)")

                let beforeUpdate = shaper.forwardedBytes
                let updateStarted = ContinuousClock.now
                try await rest.executeOK("UPDATE docs SET n = 1 WHERE _id = 'big'")
                #expect(await eventually(within: .seconds(120)) {
                    ((try? peer.execute("SELECT n FROM docs WHERE _id = 'big'").items) ?? []).first?["n"] == .int(1)
                })
                let updateTime = ContinuousClock.now - updateStarted
                // Count the acks and checkpoint after the update too: until the link carries
                // nothing for half a second (no state to wait for but silence).
                var last = -1
                while shaper.forwardedBytes != last {
                    last = shaper.forwardedBytes
                    try await Task.sleep(for: .milliseconds(500))
                }
                let updateBytes = shaper.forwardedBytes - beforeUpdate
                print("BLE shaped link: one-field update of the 250 KB document: \(updateBytes) bytes, visible after \(updateTime)")
                #expect(updateBytes < 4_000, "a one-field update costs bytes of the field, not of the document: \(updateBytes)")
                #expect(bigBytes > 250_000)
            }
        }
    }

    /// The shaped link is lost (silence: no close reaches either end) mid-sync; supervision ends
    /// both sides' links, the client reconnects, and everything either side wrote arrives.
    @Test func aLinkLostMidSyncReconnectsWithoutLosingData() async throws {
        try await Self.withNode(keepalive: .milliseconds(200), supervision: .seconds(1)) { server, key, dir in
            let rest = server.rest(key: key)
            for batch in 0..<4 {
                let docs = (0..<50).map { "({'_id': 's\(batch * 50 + $0)', 'body': '\(String(repeating: "s", count: 200))'})" }.joined(separator: ", ")
                try await rest.executeOK("INSERT INTO docs DOCUMENTS \(docs)")
            }
            let shaper = try PacketLinkShaper(path: dir + "/lossy", to: dir + "/node",
                                              conditions: .init(bytesPerSecond: 200_000, latency: .milliseconds(10), lossPercentPerPacket: 2, maxLosses: 2))
            defer { shaper.stop() }
            let peerDir = TempDirectory()
            defer { peerDir.cleanup() }
            let peer = try openPeer(peerDir.path)
            _ = try peer.subscribe("SELECT * FROM docs")
            for i in 0..<200 { _ = try peer.execute("INSERT INTO docs DOCUMENTS ({'_id': 'p\(i)', 'body': '\(String(repeating: "p", count: 200))'})") }
            var configuration = SyncClient.Configuration(url: "seqpacket://\(dir)/lossy", apiKey: key)
            configuration.bleKeepaliveInterval = .milliseconds(200)
            configuration.bleSupervisionTimeout = .seconds(1)
            configuration.reconnectBase = .milliseconds(50)
            configuration.reconnectMax = .milliseconds(500)
            let client = try SyncClient(peer: peer, configuration: configuration)
            try await afterwards({ await client.stop() }) {
                #expect(await eventually(within: .seconds(300)) { Self.ids(peer, "docs").count == 400 }, "every document of the node reached the peer")
                #expect(await eventually(within: .seconds(300)) {
                    ((try? await rest.executeOK("SELECT * FROM docs"))?["items"]?.arrayValue?.count) == 400
                }, "every document of the peer reached the node")
                #expect(shaper.losses >= 1, "the link was lost at least once")
                #expect(client.status.linksOpened >= shaper.losses + 1, "\(client.status)")
            }
        }
    }
}
