import BigPeerTestSupport
import Sockets
import Testing
@testable import Postgres

@Suite struct PostgresErrorsTests {
    @Test func syntaxErrorCarriesSQLStateAndPosition() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            do {
                _ = try await c.query("SELEC 1")
                Issue.record("expected an error")
            } catch let e as PostgresError {
                guard case .server(let s) = e else { Issue.record("wrong error \(e)"); return }
                #expect(s.sqlState == "42601")
                #expect(s.position == 1)
                #expect(e.description == "database error 42601")  // no server text for clients
                #expect(e.debugDescription.contains("syntax error"))
            }
            // The session is usable after an error.
            #expect(try await c.query("SELECT 1")[0].decode(0, as: Int.self) == 1)
        }
    }

    @Test func uniqueViolationIs23505WithConstraint() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE u (id int PRIMARY KEY)")
            _ = try await c.query("INSERT INTO u VALUES (\(1))")
            await #expect {
                _ = try await c.query("INSERT INTO u VALUES (\(1))")
            } throws: { e in
                guard case PostgresError.server(let s) = e else { return false }
                return s.sqlState == "23505" && s.constraint == "u_pkey" && s.detail != nil
            }
        }
    }

    @Test func badURLIsAClearConfigurationError() {
        #expect {
            _ = try PostgresConfiguration(url: "postgresql://host:notaport:/x?=")
        } throws: { e in
            guard case PostgresError.invalidConfiguration = e else { return false }
            return true
        }
        #expect(throws: PostgresError.self) { _ = try PostgresConfiguration(url: "postgresql://a/b?nosuchoption=1") }
    }

    @Test func refusedConnectionIsConnectionFailed() async throws {
        let port = try LocalPostgres.freeLoopbackPort()
        let config = try PostgresConfiguration(url: "postgresql://nobody@127.0.0.1:\(port)/x")
        await #expect {
            _ = try await PostgresConnection.connect(config, on: TestLoops.group.next())
        } throws: { e in
            guard case PostgresError.connectionFailed(let m) = e else { return false }
            return m.contains("refused") && (e as? PostgresError)?.isUnavailable == true
        }
    }

    @Test(.needsTheTestCluster) func wrongPasswordOverTCPIsConnectionFailed() async throws {
        let cluster = try #require(await TestPostgres.cluster())
        let config = try PostgresConfiguration(url: "postgresql://\(LocalPostgres.superuser):wrong@127.0.0.1:\(cluster.port)/postgres")
        await #expect {
            _ = try await PostgresConnection.connect(config, on: TestLoops.group.next())
        } throws: { e in
            guard case PostgresError.connectionFailed(let m) = e else { return false }
            return m.contains("password authentication failed")
        }
        // The right password works over TCP.
        let ok = try await PostgresConnection.connect(try PostgresConfiguration(url: cluster.url(database: "postgres")), on: TestLoops.group.next())
        #expect(try await ok.query("SELECT 1")[0].decode(0, as: Int.self) == 1)
        await ok.close()
    }

    @Test func statementOnClosedConnectionFailsCleanly() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            await c.close()
            await #expect(throws: PostgresError.self) { _ = try await c.query("SELECT 1") }
        }
    }
}
