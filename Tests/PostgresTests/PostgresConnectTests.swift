import BigPeerTestSupport
import Testing
@testable import Postgres

/// Connecting when libpq tries more than one host or address: it closes the socket of one that
/// failed and opens the next, usually under the same descriptor number, which epoll no longer
/// watches (`PostgresConnection.watch(_:renew:)`).
@Suite struct PostgresConnectTests {
    /// The URL's hosts in order: the first refuses (nothing listens on 127.0.0.2 at the cluster's
    /// port; a unix socket directory that does not exist), the second is the test cluster's TCP
    /// listener. The session must open well inside the connect timeout, and work.
    @Test(.timeLimit(.minutes(1)))
    func secondHostOfAMultiHostURL() async throws {
        guard let cluster = try await TestPostgres.cluster() else { return }  // an external test database: no TCP password known
        for first in ["127.0.0.2", "/nonexistent-bigpeer-socket-dir"] {
            var config = try PostgresConfiguration(url: "postgresql://\(LocalPostgres.superuser):\(cluster.password)@127.0.0.1:\(cluster.port)/postgres")
            config["host"] = "\(first),127.0.0.1"
            config["port"] = "\(cluster.port),\(cluster.port)"
            config.connectTimeout = .seconds(5)
            let started = ContinuousClock.now
            let c = try await PostgresConnection.connect(config, on: TestLoops.group.next())
            #expect(ContinuousClock.now - started < .seconds(4), "connecting via \(first) first")
            #expect(try await c.query("SELECT inet_server_addr()::text")[0].decode(0, as: String.self).hasPrefix("127.0.0.1"))
            await c.close()
        }
    }
}
