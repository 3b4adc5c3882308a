@testable import BigPeerServer
import BigPeerTestSupport
import ServerTestSupport
import HTTP
import Postgres
import Store
import Testing
import Values

@Suite struct ServiceLifecycleTests {
    @Test func serviceMigratesServesHealthAndStops() async throws {
        try await TestPostgres.withDatabase { db in
            let service = try await BigPeerService.start(InProcessServer.configuration(db))
            #expect(service.database.migrationReport.applied.contains("0001_settings.sql"))

            let client = try HTTPClient()
            let health = try await client.get("http://127.0.0.1:\(service.port)/healthz")
            #expect(health.status.code == 200)
            #expect(String(decoding: health.body, as: UTF8.self) == #"{"status":"ok"}"#)
            let ready = try await client.get("http://127.0.0.1:\(service.port)/readyz")
            #expect(ready.status.code == 200)
            let missing = try await client.get("http://127.0.0.1:\(service.port)/nope")
            #expect(missing.status.code == 404)
            // What `stop` does first: from then on the instance is not ready, whatever its database says.
            service.drain.start()
            let draining = try await client.get("http://127.0.0.1:\(service.port)/readyz")
            #expect(draining.status.code == 503 && draining.headers["Retry-After"] == "5")
            #expect(String(decoding: draining.body, as: UTF8.self).contains(#""status":"draining""#))
            #expect(try await client.get("http://127.0.0.1:\(service.port)/healthz").status.code == 200, "alive while it drains")
            await client.shutdown()

            // The settings table exists for ALTER SYSTEM.
            let pool = db.makePool()
            #expect(try await pool.query("SELECT count(*) FROM bigpeer_settings")[0].decode(0, as: Int.self) == 0)

            await service.stop()
            let after = try HTTPClient()
            await #expect(throws: HTTPClientError.self) { _ = try await after.get("http://127.0.0.1:\(service.port)/healthz") }
            await after.shutdown()
        }
    }

    @Test func secondInstanceOnTheSameDatabaseFindsMigrationsApplied() async throws {
        try await TestPostgres.withDatabase { db in
            let config = InProcessServer.configuration(db)
            async let a = BigPeerService.start(config)
            async let b = BigPeerService.start(config)
            let (first, second) = try await (a, b)
            let appliedA = first.database.migrationReport.applied, appliedB = second.database.migrationReport.applied
            #expect(Set(appliedA).isDisjoint(with: appliedB))  // no migration applied twice
            #expect(appliedA.count + appliedB.count == first.database.migrationReport.applied.count + first.database.migrationReport.alreadyApplied.count)
            #expect(first.port != second.port)

            // A write through one instance is visible through the other, with a transaction id the
            // other honours in X-DITTO-TXN-ID.
            let write = try await first.store.execute("INSERT INTO cars DOCUMENTS ({_id: 'a', color: 'red'})")
            let read = try await second.store.execute("SELECT color FROM cars", minimumTransaction: write.transactionID)
            #expect(read.items == [["color": "red"]])
            #expect(read.transactionID >= write.transactionID)
            await first.stop()
            await second.stop()
        }
    }
}
