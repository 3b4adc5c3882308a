// A seeded simulation (issue #18): a cloud and two local nodes as real processes, a SmallPeer on
// each node, and random steps — REST writes on any server, small-peer writes, counter increments
// from everywhere, nodes and the cloud stopped (SIGTERM or SIGKILL) and started again, small peers
// disconnected and reconnected. At the end, with everything up: every replica holds the same
// documents, and every counter equals the increments that were acknowledged.
// SIM_SEED=n runs another seed; SIM_VERBOSE=1 prints the steps.

import BigPeerTestSupport
import Foundation
import HTTP
import SmallPeer
import TestRandomness
import Testing
import Values

@Suite(.serialized) struct ReplicationSimulationTests {
    static let query = "SELECT * FROM sim"

    /// A small peer and its client (nil while disconnected).
    final class Phone {
        let peer: SmallPeer
        let url: String
        var client: SyncClient?
        init(peer: SmallPeer, url: String) {
            self.peer = peer
            self.url = url
        }
        func connect() throws { if client == nil { client = try SyncClient(peer: peer, configuration: SyncClient.Configuration(url: url, apiKey: nil)) } }
        func disconnect() async {
            await client?.stop()
            client = nil
        }
    }

    @Test func randomStepsOverThreeServersAndTwoPhones_endEqual_withExactCounters() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["SIM_SEED"].flatMap { UInt64($0) } ?? 0x5EED_0018)
        try await withDatabases(3) { urls, http, processes in
            var rng = SeededRandom(seed: seed)
            var cloud = try await Server.start(urls[0], http: http, processes: processes)
            var nodes = [
                try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: [Self.query], http: http, processes: processes),
                try await Server.start(urls[2], upstreamPort: cloud.port, subscribe: [Self.query], http: http, processes: processes),
            ]
            var up = [true, true, true]  // cloud, node 0, node 1
            let dir = NSTemporaryDirectory() + "replication-sim-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let phones = try (0..<2).map { i in
                let p = try SmallPeer(directory: dir + "/phone\(i)")
                _ = try p.subscribe(Self.query)
                return Phone(peer: p, url: nodes[i].syncURL)
            }
            for p in phones { try p.connect() }
            // Every counter document exists everywhere before anyone increments it (an UPDATE of a
            // document a replica does not hold yet changes nothing there). Increments are counted
            // only when they changed a document.
            try await cloud.execute("INSERT INTO COLLECTION sim (n COUNTER) DOCUMENTS " + (0..<4).map { "({'_id': 'k\($0)', 'n': 0})" }.joined(separator: ", "))
            let seeded = await eventually(within: .seconds(30)) {
                for s in nodes where (try? await s.count("sim")) != 4 { return false }
                return phones.allSatisfy { ((try? $0.peer.execute("SELECT * FROM sim").items.count) ?? 0) == 4 }
            }
            #expect(seeded)
            var expected = [Int](repeating: 0, count: 4)
            var log: [String] = []

            for step in 0..<40 {
                let servers = [cloud] + nodes
                let live = (0..<3).filter { up[$0] }
                switch rng.below(10) {
                case 0...3:  // a REST write on a live server
                    guard let i = live.randomElement(using: &rng) else { continue }
                    let s = servers[i]
                    if rng.chance(50) {
                        let k = rng.below(4)
                        let r = try await s.execute("UPDATE COLLECTION sim (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k\(k)'")
                        #expect(r["mutatedDocumentIds"]?.arrayValue?.count == 1)
                        expected[k] += 1
                        log.append("\(step): +1 k\(k) on server \(i)")
                    } else {
                        let id = "d\(rng.below(12))"
                        try await s.execute("INSERT INTO sim DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", ["d": ["_id": .string(id), "v": .int(Int64(step)), "by": .int(Int64(i))]])
                        log.append("\(step): upsert \(id) on server \(i)")
                    }
                case 4...5:  // a phone writes (online or not)
                    let p = phones[rng.below(2)]
                    if rng.chance(50) {
                        let k = rng.below(4)
                        let r = try p.peer.execute("UPDATE COLLECTION sim (n COUNTER) APPLY n INCREMENT BY 2 WHERE _id = 'k\(k)'")
                        #expect(r.mutatedDocumentIDs.count == 1)
                        expected[k] += 2
                        log.append("\(step): +2 k\(k) on a phone")
                    } else {
                        let id = "p\(rng.below(6))"
                        _ = try p.peer.execute("INSERT INTO sim DOCUMENTS (:d) ON ID CONFLICT DO UPDATE", arguments: ["d": ["_id": .string(id), "v": .int(Int64(step))]])
                        log.append("\(step): upsert \(id) on a phone")
                    }
                case 6...7:  // a server goes down, or comes back
                    let i = rng.below(3)
                    if up[i] {
                        if rng.chance(50) { await servers[i].kill() } else { await servers[i].stop() }
                        up[i] = false
                        log.append("\(step): server \(i) down")
                    } else {
                        let restarted = try await servers[i].restart(http: http, processes: processes)
                        if i == 0 { cloud = restarted } else { nodes[i - 1] = restarted }
                        up[i] = true
                        log.append("\(step): server \(i) up")
                    }
                default:  // a phone drops its link, or gets it back
                    let p = phones[rng.below(2)]
                    if p.client == nil { try p.connect() } else { await p.disconnect() }
                    log.append("\(step): phone link toggled")
                }
                try await Task.sleep(for: .milliseconds(Int64(rng.below(300))))
            }

            // Everything up again, every phone connected: all replicas converge.
            for i in 0..<3 where !up[i] {
                let restarted = try await ([cloud] + nodes)[i].restart(http: http, processes: processes)
                if i == 0 { cloud = restarted } else { nodes[i - 1] = restarted }
            }
            for p in phones { try p.connect() }
            let everyone = [cloud] + nodes
            func phoneDocs(_ p: Phone) -> [Value] { (try? p.peer.execute("SELECT * FROM sim ORDER BY _id").items) ?? [] }
            let done = await eventually(within: .seconds(90)) {
                guard await converged(everyone, "sim"), let reference = try? await cloud.documents("sim") else { return false }
                return phones.allSatisfy { phoneDocs($0) == reference }
            }
            #expect(done, "replicas did not converge (seed \(seed)); steps:\n\(log.joined(separator: "\n"))")
            let counters = try await cloud.documents("sim").filter { $0["_id"]?.stringValue?.hasPrefix("k") == true }
            var everywhere: [String] = []
            for s in everyone {
                let c = try await s.documents("sim").filter { $0["_id"]?.stringValue?.hasPrefix("k") == true }.map { Int($0["n"]?.doubleValue ?? -1) }
                everywhere.append("server \(s.port): \(c)")
            }
            for (i, p) in phones.enumerated() {
                everywhere.append("phone \(i): \(phoneDocs(p).filter { $0["_id"]?.stringValue?.hasPrefix("k") == true }.map { Int($0["n"]?.doubleValue ?? -1) })")
            }
            #expect(counters.map { Int($0["n"]?.doubleValue ?? -1) } == expected,
                    "counters (seed \(seed)): \(everywhere.joined(separator: "; "))\nsteps:\n\(log.joined(separator: "\n"))")
            if ProcessInfo.processInfo.environment["SIM_VERBOSE"] != nil { print(log.joined(separator: "\n")) }
            for p in phones { await p.disconnect() }
        }
    }
}
