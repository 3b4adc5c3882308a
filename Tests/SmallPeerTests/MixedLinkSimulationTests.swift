import BigPeerServer
import BigPeerTestSupport
import Foundation
import ServerTestSupport
@testable import SmallPeer
import Sockets
import TestRandomness
import Testing
import Values

/// A seeded simulation of issue #20: small peers on mixed links to one node (LAN TCP and
/// WebSocket through `LinkProxy`s that fail and come back, BLE through lossy `PacketLinkShaper`s)
/// write while links drop and return. At the end every peer and the node hold every document,
/// no peer ever started its session over, and no document reached a peer twice: the writes are
/// inserts of unique ids, so each peer receives each document it did not write exactly once.
@Suite(.serialized) struct MixedLinkSimulationTests {
    enum Kind { case lan, webSocket, ble }

    /// One link of one peer, and how the simulation breaks it.
    final class SimulatedLink: Sendable {
        let url: String
        let proxy: LinkProxy?
        let shaper: PacketLinkShaper?
        init(url: String, proxy: LinkProxy? = nil, shaper: PacketLinkShaper? = nil) {
            self.url = url
            self.proxy = proxy
            self.shaper = shaper
        }
        func stop() {
            proxy?.stop()
            shaper?.stop()
        }
    }

    static let linkSets: [[Kind]] = [[.lan, .ble], [.webSocket, .ble], [.lan, .webSocket], [.ble]]

    @Test func peersOnMixedLinksConvergeWithoutStartingOverOrReceivingTwice() async throws {
        let dir = "/tmp/mix-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var rng = SeededRandom(seed: 0x20_0B1E)
        try await TestPostgres.withDatabase { db in
            let server = try await LinkSwitchMeasurement.node(db, dir: dir)
            try await afterwards({ await server.stop() }) {
                let key = try await server.newKey()
                let rest = server.rest(key: key)
                let lanPort = try #require(server.service.lanPort)
                var links: [[SimulatedLink]] = []
                for (i, kinds) in Self.linkSets.enumerated() {
                    links.append(try kinds.enumerated().map { j, kind in
                        switch kind {
                        case .lan:
                            let p = try LinkProxy(to: lanPort)
                            return SimulatedLink(url: "tcp://127.0.0.1:\(p.port)", proxy: p)
                        case .webSocket:
                            let p = try LinkProxy(to: server.port)
                            return SimulatedLink(url: "ws://127.0.0.1:\(p.port)", proxy: p)
                        case .ble:
                            let s = try PacketLinkShaper(path: "\(dir)/p\(i)-\(j)", to: dir + "/node", conditions: .init(
                                bytesPerSecond: 200_000, latency: .milliseconds(10), lossPercentPerPacket: 3, maxLosses: 3,
                                seed: 0xB1E + UInt64(i)))
                            return SimulatedLink(url: "seqpacket://\(dir)/p\(i)-\(j)", shaper: s)
                        }
                    })
                }
                defer { links.joined().forEach { $0.stop() } }
                let dirs = Self.linkSets.indices.map { TempDirectory("mix\($0)") }
                defer { dirs.forEach { $0.cleanup() } }
                let peers = try dirs.map { try openPeer($0.path) }
                for p in peers { _ = try p.subscribe("SELECT * FROM sim") }
                let clients = try peers.enumerated().map { i, peer in
                    var c = SyncClient.Configuration(url: links[i][0].url, apiKey: key)
                    c.fallbackURLs = links[i].dropFirst().map(\.url)
                    c.resumable = true
                    c.reconnectBase = .milliseconds(50)
                    c.reconnectMax = .milliseconds(500)
                    c.bleKeepaliveInterval = .milliseconds(200)
                    c.bleSupervisionTimeout = .seconds(1)
                    return try SyncClient(peer: peer, configuration: c)
                }
                try await afterwards({ for c in clients { await c.stop() } }) {
                    var written: [Set<String>] = Array(repeating: [], count: peers.count)
                    var fromServer: Set<String> = []
                    for round in 0..<16 {
                        for (i, peer) in peers.enumerated() {
                            for n in 0..<rng.below(6) {
                                let id = "p\(i)-\(round)-\(n)"
                                _ = try peer.execute("INSERT INTO sim DOCUMENTS (:d)", arguments: ["d": ["_id": .string(id), "body": .string(String(repeating: "x", count: 300))]])
                                written[i].insert(id)
                            }
                        }
                        for n in 0..<rng.below(6) {
                            let id = "s-\(round)-\(n)"
                            try await rest.executeOK("INSERT INTO sim DOCUMENTS ({'_id': '\(id)', 'body': 'from the node'})")
                            fromServer.insert(id)
                        }
                        for link in links.joined() {
                            guard let proxy = link.proxy, rng.chance(45) else { continue }
                            if rng.chance(50) { LinkSwitchTests.fail(proxy) } else { proxy.set(.init()) }
                        }
                        try await Task.sleep(for: .milliseconds(200 + rng.below(600)))
                    }
                    for link in links.joined() { link.proxy?.set(.init()) }
                    let all = written.reduce(fromServer) { $0.union($1) }
                    for (i, client) in clients.enumerated() {
                        #expect(await eventually(within: .seconds(120)) { BLELinkTests.ids(peers[i], "sim") == all }, "peer \(i): \(client.status)")
                        try await client.waitUntilCaughtUp(timeout: .seconds(60))
                    }
                    let onNode = try await rest.executeOK("SELECT COUNT(*) AS n FROM sim")["items"]?.arrayValue?.first?["n"]
                    #expect(onNode == .int(Int64(all.count)))
                    var resumes = 0
                    for (i, client) in clients.enumerated() {
                        let status = client.status
                        resumes += status.resumes
                        #expect(status.sessions == 1, "peer \(i) never started over: \(status.sessionEnds) \(status)")
                        #expect(status.receivedEntries == all.count - written[i].count, "peer \(i) received every document once: \(status)")
                    }
                    #expect(resumes >= 5, "links dropped and sessions moved: \(resumes) resumes")
                    print("mixed-link simulation: \(all.count) documents, \(resumes) resumes, BLE losses \(links.joined().compactMap { $0.shaper?.losses })")
                }
            }
        }
    }
}
