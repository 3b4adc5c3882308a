import BigPeerTestSupport
import Sockets
import Testing
@testable import Postgres

/// Connecting when libpq tries more than one host or address: it closes the socket of one that
/// failed and opens the next, usually under the same descriptor number, which epoll no longer
/// watches (`PostgresConnection.watch(_:renew:)`).
extension Trait where Self == ConditionTrait {
    /// For tests that connect as the test cluster's superuser over TCP: an external test database
    /// (`BIGPEER_TEST_DATABASE_URL`) gives no password for that, so they are reported as skipped.
    static var needsTheTestCluster: Self {
        .disabled(if: TestPostgres.usesExternalServer, "needs the test cluster's superuser password; an external test database has none to give")
    }
}

@Suite struct PostgresConnectTests {
    /// The URL's hosts in order: the first refuses (nothing listens on 127.0.0.2 at the cluster's
    /// port; a unix socket directory that does not exist), the second is the test cluster's TCP
    /// listener. The session must open, and work.
    @Test(.timeLimit(.minutes(2)), .needsTheTestCluster)
    func secondHostOfAMultiHostURL() async throws {
        let cluster = try #require(await TestPostgres.cluster())
        for first in ["127.0.0.2", "/nonexistent-bigpeer-socket-dir"] {
            var config = try PostgresConfiguration(url: "postgresql://\(LocalPostgres.superuser):\(cluster.password)@127.0.0.1:\(cluster.port)/postgres")
            config["host"] = "\(first),127.0.0.1"
            config["port"] = "\(cluster.port),\(cluster.port)"
            // Without the fix the connect waits on a socket epoll no longer watches until this
            // timeout, and throws; with it, it connects (how fast depends on the machine's load).
            config.connectTimeout = .seconds(30)
            let c = try await PostgresConnection.connect(config, on: TestLoops.group.next())
            #expect(try await c.query("SELECT inet_server_addr()::text")[0].decode(0, as: String.self).hasPrefix("127.0.0.1"))
            await c.close()
        }
    }

    /// A host given by name is looked up off the event loop (`BlockingCall`), and the session
    /// works. (That the lookup no longer holds the loop is by construction; a slow resolver cannot
    /// be staged here.)
    @Test(.timeLimit(.minutes(1)), .needsTheTestCluster)
    func aHostGivenByName() async throws {
        let cluster = try #require(await TestPostgres.cluster())
        var config = try PostgresConfiguration(url: "postgresql://\(LocalPostgres.superuser):\(cluster.password)@localhost:\(cluster.port)/postgres")
        config.connectTimeout = .seconds(30)
        let c = try await PostgresConnection.connect(config, on: TestLoops.group.next())
        #expect(try await c.query("SELECT 1")[0].decode(0, as: Int32.self) == 1)
        await c.close()
        // A name that does not resolve fails with libpq's message, not a hang.
        config["host"] = "no-such-host.invalid"
        await #expect(throws: PostgresError.self) { _ = try await PostgresConnection.connect(config, on: TestLoops.group.next()) }
    }
}
