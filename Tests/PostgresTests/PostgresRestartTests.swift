import BigPeerTestSupport
import Foundation
import Sockets
import Testing
@testable import Postgres

/// Uses a cluster of its own: restarting the shared one would break tests running beside it.
@Suite struct PostgresRestartTests {
    @Test func poolAndListenerSurviveAServerRestart() async throws {
        try await TestPostgres.withOwnCluster { cluster, _, _ in try await Self.restartScenario(cluster) }
    }

    static func restartScenario(_ cluster: LocalPostgres) async throws {
        let pool = PostgresPool(cluster.configuration(), group: TestLoops.group)
        let listener = try await PostgresListener(cluster.configuration(), channels: ["ch"], loop: TestLoops.group.next())
        _ = try await pool.query("CREATE TABLE t (v int)")

        // A statement in flight while the server restarts fails cleanly.
        // Long enough that the restart, however slow under load, always interrupts it.
        let inFlight = Task { try await pool.query("SELECT pg_sleep(600)") }
        let observer = try await PostgresConnection.connect(cluster.configuration(), on: TestLoops.group.next())
        #expect(try await eventually {
            try await observer.query("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()")[0]
                .decode(0, as: Int.self) == 1
        }, "the statement is in flight")
        await observer.close()
        try await cluster.restartOffPool()
        await #expect {
            _ = try await inFlight.value
        } throws: { e in (e as? PostgresError)?.isUnavailable == true }

        // Later statements succeed on fresh sessions.
        #expect(await eventually { (try? await pool.query("INSERT INTO t VALUES (\(1))")) != nil })
        #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 1)

        // The listener reconnected and says so, then receives new notifications.
        var it = listener.events.makeAsyncIterator()
        #expect(await it.next() == .disconnected)
        #expect(await it.next() == .reconnected)
        _ = try await pool.query("SELECT pg_notify('ch', 'after')")
        guard case .notification(let n) = await it.next() else { Issue.record("no notification"); return }
        #expect(n.payload == "after")
        await listener.stop()
        await pool.shutdown()
    }
}
