import BigPeerTestSupport
import Foundation
import HTTP
import Testing
import Values

/// Several instances of a local node on one database, each with `--upstream`: the one holding
/// the database's replication lock replicates, the other stands by, and takes over when the
/// first dies (docs/LOCAL-NODE.md, "Several instances on one node database").
@Suite(.serialized) struct SeveralInstancesTests {
    static func state(_ server: Server) async -> String? {
        (try? await server.upstreamStatus())?["state"]?.stringValue
    }

    @Test func oneInstanceReplicates_theOtherStandsBy_andTakesOverWhenItDies() async throws {
        try await withDatabases(2) { urls, http, processes in
            let cloud = try await Server.start(urls[0], http: http, processes: processes)
            let subscribe = ["SELECT * FROM things"]
            let a = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: subscribe, http: http, processes: processes)
            let b = try await Server.start(urls[1], upstreamPort: cloud.port, subscribe: subscribe, http: http, processes: processes)
            #expect(await eventually(within: .seconds(30)) {
                let states = [await Self.state(a), await Self.state(b)].compactMap { $0 }.sorted()
                return states == ["connected", "standby"]
            }, "one replicates, one stands by")
            let (leader, standby) = await Self.state(a) == "connected" ? (a, b) : (b, a)
            let reason = try await standby.upstreamStatus()["standbyReason"]?.stringValue ?? ""
            #expect(reason.contains("another instance"), "\(reason)")

            // A write on the standby instance goes up through the other (one change log).
            try await standby.execute("INSERT INTO things DOCUMENTS ({'_id': 'from-standby'})")
            try await cloud.execute("INSERT INTO things DOCUMENTS ({'_id': 'from-cloud'})")
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, leader, standby], "things", minimum: 2) })
            #expect(await Self.state(standby) == "standby", "still standing by (the lock is held)")

            // The leader dies: the standby takes the lock and replicates.
            await leader.kill()
            #expect(await eventually(within: .seconds(60)) { await Self.state(standby) == "connected" }, "took over")
            try await standby.execute("INSERT INTO things DOCUMENTS ({'_id': 'after-failover'})")
            try await cloud.execute("INSERT INTO things DOCUMENTS ({'_id': 'cloud-after-failover'})")
            #expect(await eventually(within: .seconds(30)) { await converged([cloud, standby], "things", minimum: 4) })
            let status = try await standby.upstreamStatus()
            #expect(status["standbyReason"] == .null, "\(status)")
            #expect(try await cloud.count("things") == 4)
        }
    }
}
