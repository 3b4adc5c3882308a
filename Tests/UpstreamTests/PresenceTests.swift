import BigPeerTestSupport
import Foundation
import Postgres
import SmallPeer
import Synchronization
import SyncProtocol
import Testing
import Values

/// Presence (PROTOCOL.md §4.14, docs/LOCAL-NODE.md "Presence") with real server processes and
/// sockets: small peers on one server see each other through it, whatever their link; metadata
/// changes and departures propagate; a local node carries its peers' records to its upstream.
@Suite(.serialized) struct PresenceTests {
    final class Locked<T: Sendable>: Sendable {
        let mutex: Mutex<T>
        init(_ value: T) { mutex = Mutex(value) }
        func withLock<R>(_ body: (inout T) -> R) -> R { mutex.withLock { body(&$0) } }
    }

    /// A SmallPeer in its own directory, syncing with `url` under `name`.
    final class Peer: Sendable {
        let peer: SmallPeer
        let client: SyncClient
        let directory: String

        init(_ name: String, url: String) throws {
            directory = NSTemporaryDirectory() + "presence-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            peer = try SmallPeer(directory: directory)
            var config = SyncClient.Configuration(url: url, apiKey: nil)
            config.deviceName = name
            client = try SyncClient(peer: peer, configuration: config)
        }

        var key: String { peer.presenceGraph.localPeer.peerKey }

        func sees(_ name: String) -> PresenceGraph.Peer? { peer.presenceGraph.remotePeers.first { $0.deviceName == name } }

        func stop() async {
            await client.stop()
            peer.close()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    static func presence(_ server: Server) async throws -> Value { try await server.rest.get("/api/v4/presence").body }

    static func remote(_ graph: Value, named name: String) -> Value? {
        graph["remotePeers"]?.arrayValue?.first { $0["deviceName"]?.stringValue == name }
    }

    static func connectionTypes(_ peer: Value?) -> [String] {
        (peer?["connections"]?.arrayValue ?? []).compactMap { $0["type"]?.stringValue }.sorted()
    }

    @Test func twoSmallPeers_overWebSocketAndLAN_seeEachOther_metadataAndDeparturesPropagate() async throws {
        try await withDatabases(1) { urls, http, processes in
            let lanPort = try LocalPostgres.freeLoopbackPort()
            let server = try await Server.start(urls[0], extra: LANLinkTests.lanArguments(lanPort), http: http, processes: processes)
            let ws = try Peer("ws-peer", url: server.syncURL)
            let seen = Locked<[PresenceGraph]>([])
            let observer = ws.peer.observePresence { graph in seen.withLock { $0.append(graph) } }
            let lan = try Peer("lan-peer", url: "tcp://127.0.0.1:\(lanPort)")

            #expect(await eventually(within: .seconds(30)) { ws.sees("lan-peer") != nil && lan.sees("ws-peer") != nil },
                    "each sees the other through the server: \(ws.peer.presenceGraph.json)")
            let far = try #require(ws.sees("lan-peer"))
            #expect(far.connections.map(\.type) == [.accessPoint], "the LAN peer's one link is a LAN TCP link")
            #expect(far.isConnectedToBigPeer && far.os == PresenceGossip.defaultOS && far.sdkVersion == PresenceGossip.sdkVersion)
            #expect(ws.peer.presenceGraph.localPeer.connections.map(\.type) == [.webSocket])
            #expect(ws.peer.presenceGraph.remotePeers.count == 2, "the server and the other peer")
            // The observer got the graph at once, then each change, never the same graph twice in a row.
            let deliveries = seen.withLock { $0 }
            #expect(deliveries.first?.remotePeers.isEmpty == true && deliveries.contains { $0.peer(far.peerKey) != nil })
            #expect(zip(deliveries, deliveries.dropFirst()).allSatisfy { $0 != $1 })

            // The server's own answer, in Ditto's shape.
            let graph = try await Self.presence(server)
            let local = try #require(graph["localPeer"])
            #expect(local["isConnectedToBigPeer"]?.boolValue == true && local["peerKey"]?.stringValue?.hasPrefix("pk") == true)
            #expect(Self.connectionTypes(local) == ["AccessPoint", "WebSocket"], "\(graph)")
            let lanEntry = try #require(Self.remote(graph, named: "lan-peer"))
            #expect(lanEntry["peerKey"]?.stringValue == lan.key && lanEntry["peerKeyString"] == lanEntry["peerKey"])
            for field in ["os", "sdkVersion", "isConnectedToDittoCloud", "peerMetadata", "identityServiceMetadata"] {
                #expect(lanEntry[field] != nil, "\(field) in \(lanEntry)")
            }
            let connection = try #require(lanEntry["connections"]?.arrayValue?.first)
            #expect(connection["id"]?.stringValue?.hasSuffix(":AccessPoint") == true && connection["peerKeyString1"] != nil
                    && connection["peerKeyString2"] != nil, "\(connection)")

            // Metadata set on one peer reaches the other and the server; more than 4 KiB is refused.
            #expect(throws: PresenceGossip.Failure.self) { try lan.peer.setPresenceMetadata(["blob": .string(String(repeating: "x", count: 5000))]) }
            try lan.peer.setPresenceMetadata(["seat": "12A"])
            #expect(await eventually(within: .seconds(30)) { ws.sees("lan-peer")?.metadata == ["seat": "12A"] })
            #expect(await eventually(within: .seconds(30)) {
                (try? await Self.presence(server)).flatMap { Self.remote($0, named: "lan-peer")?["peerMetadata"] } == ["seat": "12A"]
            })

            observer.cancel()
            let count = seen.withLock { $0.count }
            try lan.peer.setPresenceMetadata(["seat": "14C"])
            #expect(await eventually(within: .seconds(30)) { ws.sees("lan-peer")?.metadata == ["seat": "14C"] })
            #expect(seen.withLock { $0.count } == count, "no delivery after cancel")

            // A peer that leaves disappears from the others' graphs and from the server's.
            await lan.client.stop()
            #expect(await eventually(within: .seconds(30)) { ws.sees("lan-peer") == nil }, "\(ws.peer.presenceGraph.json)")
            #expect(await eventually(within: .seconds(30)) {
                (try? await Self.presence(server)).map { Self.remote($0, named: "lan-peer") == nil } ?? false
            })
            await ws.stop()
            await lan.stop()
        }
    }

    /// cloud ← node (--upstream) ← small peer over LAN, and another small peer on the cloud: the
    /// cloud's presence and the cloud-side peer show the far peer, two and three hops away.
    @Test func aLocalNodeCarriesItsPeersToTheCloud_multiHop() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let lanPort = try LocalPostgres.freeLoopbackPort()
            let node = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: ["SELECT * FROM crew"],
                                              extra: LANLinkTests.lanArguments(lanPort), http: http, processes: processes)
            let onShip = try Peer("on-ship", url: "tcp://127.0.0.1:\(lanPort)")
            let ashore = try Peer("ashore", url: cloud.syncURL)

            let cloudSees = await eventually(within: .seconds(30)) {
                (try? await Self.presence(cloud)).flatMap { Self.remote($0, named: "on-ship") } != nil
            }
            let cloudGraph = (try? await Self.presence(cloud)) ?? .null
            #expect(cloudSees, "the cloud sees the peer behind the node: \(cloudGraph)")
            #expect(await eventually(within: .seconds(30)) { ashore.sees("on-ship") != nil && onShip.sees("ashore") != nil },
                    "peers on either side see each other, three hops apart")
            let graph = try await Self.presence(node)
            #expect(Self.connectionTypes(graph["localPeer"]) == ["AccessPoint", "WebSocket"], "the node's LAN peer and its upstream: \(graph)")
            await onShip.stop()
            await ashore.stop()
        }
    }

    /// Two instances on one database: a peer of one appears in the other's presence and to the
    /// other's peers (through the bigpeer_presence table), and disappears when its instance dies.
    @Test func severalInstancesOnOneDatabase_shareTheirPeers() async throws {
        try await withDatabases(1) { urls, http, processes in
            let first = try await Server.start(urls[0], http: http, processes: processes)
            let second = try await Server.start(urls[0], http: http, processes: processes)
            let a = try Peer("peer-a", url: first.syncURL)
            let b = try Peer("peer-b", url: second.syncURL)
            #expect(await eventually(within: .seconds(30)) {
                (try? await Self.presence(second)).flatMap { Self.remote($0, named: "peer-a") } != nil
            }, "instance B answers with instance A's peer")
            #expect(await eventually(within: .seconds(30)) { b.sees("peer-a") != nil && a.sees("peer-b") != nil },
                    "the peers of the two instances see each other")
            let graph = try await Self.presence(second)
            #expect(Self.connectionTypes(graph["localPeer"]) == ["WebSocket", "WebSocket"], "one server, both peers linked to it: \(graph)")
            await first.kill()
            #expect(await eventually(within: .seconds(40)) { b.sees("peer-a") == nil }, "gone with its instance: \(b.peer.presenceGraph.json)")
            await a.stop()
            await b.stop()
        }
    }

    /// Presence is server-wide state: like `/api/v4/upstream` it needs a key that may read everything.
    @Test func presenceNeedsAKeyThatMayReadEverything() async throws {
        try await withDatabases(1) { urls, http, processes in
            let narrow = try await createAPIKey(urls[0], ["--read", "cars"])
            let admin = try await createAPIKey(urls[0], ["--read-all"])
            let server = try await Server.start(urls[0], http: http, processes: processes, secure: true)
            #expect(try await RESTClient(http: http, port: server.port, key: narrow).get("/api/v4/presence").status == 403)
            let reply = try await RESTClient(http: http, port: server.port, key: admin).get("/api/v4/presence")
            #expect(reply.status == 200 && reply.body["localPeer"]?["sdkVersion"]?.stringValue == PresenceGossip.sdkVersion, "\(reply.text)")
            #expect(reply.body["remotePeers"] == [])
        }
    }

    /// `bigpeer peer --sync-once --presence` prints the graph after syncing, with its own metadata.
    @Test func theCLIPrintsTheGraph() async throws {
        try await withDatabases(1) { urls, http, processes in
            let server = try await Server.start(urls[0], http: http, processes: processes)
            let other = try Peer("other", url: server.syncURL)
            #expect(await eventually(within: .seconds(30)) { other.peer.presenceGraph.remotePeers.first?.sdkVersion.isEmpty == false }, "the server's record")
            let dir = NSTemporaryDirectory() + "presence-cli-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try ServerProcess.locateBinary())
            process.arguments = ["peer", "--data", dir, "--url", server.syncURL, "--sync-once", "--presence", "--name", "cli",
                                 "--presence-metadata", "{\"seat\": \"7C\"}"]
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            let data = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
            let graph = try #require(lines.compactMap { try? JSON.parse(String($0)) }.first { $0["presence"] != nil }?["presence"])
            #expect(graph["localPeer"]?["deviceName"]?.stringValue == "cli" && graph["localPeer"]?["peerMetadata"] == ["seat": "7C"])
            #expect(Self.remote(graph, named: "other")?["sdkVersion"]?.stringValue == PresenceGossip.sdkVersion, "\(graph)")
            #expect(await eventually(within: .seconds(30)) { other.sees("cli") == nil }, "the CLI peer left")
            await other.stop()
        }
    }
}
