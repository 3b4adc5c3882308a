import BigPeerTestSupport
import Foundation
import HTTP
import Testing
import Values

/// The link between a node and its cloud goes bad while both stay up (a `LinkProxy` between them:
/// `tc netem` needs queueing disciplines this machine's kernel does not have): slow and throttled,
/// cut for a while (bytes held, no FIN, no RST), and cut with every connection reset. Writes on both
/// sides meanwhile; when the link is back, both sides converge and counters are exact.
@Suite(.serialized) struct LinkFaultTests {
    @Test func slowThenCutThenReset_bothSidesAlive_convergeWithExactCounters() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let link = try LinkProxy(to: cloud.port)
            defer { link.stop() }
            let node = try await Server.start(urls[1], upstreamPort: link.port, subscribe: ["SELECT * FROM cars"], http: http, processes: processes)
            try await cloud.execute("INSERT INTO COLLECTION cars (n COUNTER) DOCUMENTS ({'_id': 'k', 'n': 0})")
            #expect(await eventually(within: .seconds(30)) { (try? await node.count("cars")) == 1 })
            var increments = 0
            func writeBothSides(_ tag: String, _ count: Int) async throws {
                for i in 0..<count {
                    try await cloud.execute("INSERT INTO cars DOCUMENTS ({'_id': '\(tag)-c\(i)', 'pad': '\(String(repeating: "c", count: 2000))'})")
                    try await node.execute("INSERT INTO cars DOCUMENTS ({'_id': '\(tag)-n\(i)', 'pad': '\(String(repeating: "n", count: 2000))'})")
                    try await cloud.execute("UPDATE COLLECTION cars (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k'")
                    try await node.execute("UPDATE COLLECTION cars (n COUNTER) APPLY n INCREMENT BY 1 WHERE _id = 'k'")
                    increments += 2
                }
            }
            func together(_ documents: Int) async -> Bool {
                await eventually(within: .seconds(60)) {
                    guard await converged([cloud, node], "cars", minimum: documents) else { return false }
                    return (try? await node.documents("cars"))?.first { $0["_id"] == "k" }?["n"]?.doubleValue == Double(increments)
                }
            }

            // Slow: 30 ms per chunk, 64 KB/s each way.
            link.set(.init(delay: .milliseconds(30), bytesPerSecond: 64 << 10))
            try await writeBothSides("slow", 20)
            let slowOK = await together(41)
            let diagnosis = "\(try await node.upstreamStatus()); cloud \(try await cloud.count("cars")), node \(try await node.count("cars"))"
            #expect(slowOK, "converged over a slow link: \(diagnosis)")

            // Cut with both ends alive: the session stays up (no FIN, heartbeat not yet missed), so
            // nothing is re-sent when the link comes back: the held bytes just arrive.
            link.set(.init(cut: true))
            try await writeBothSides("cut", 20)
            try await Task.sleep(for: .seconds(2))
            let during = try await node.upstreamStatus()
            #expect(during["state"] == "connected", "\(during)")
            #expect((during["pendingUploads"]?["changes"]?.int64Value ?? 0) > 0, "\(during)")
            link.set(.init())
            #expect(await together(81), "converged once the cut link came back")

            // Cut, and every connection reset: the node reconnects (each attempt is held, then
            // times out) until the link comes back.
            link.set(.init(cut: true))
            link.resetConnections()
            try await writeBothSides("reset", 20)
            #expect(await eventually(within: .seconds(30)) { (try? await node.upstreamStatus())?["state"] != "connected" })
            link.set(.init())
            #expect(await together(121), "converged after reconnecting")
            let status = try await node.upstreamStatus()
            #expect(status["rejectedUploads"] == 0)
            #expect((status["sessions"]?.int64Value ?? 0) >= 2, "\(status)")
        }
    }
}
