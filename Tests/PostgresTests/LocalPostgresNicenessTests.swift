import BigPeerTestSupport
import Foundation
import Sockets
import Testing
@testable import Postgres

/// `LocalPostgres.Options.niceness` (`bigpeer serve --database-nice`): the private cluster's
/// postmaster, and so every backend, runs at that nice value, also after a restart.
@Suite struct LocalPostgresNicenessTests {
    /// Field 19 of /proc/PID/stat, after the command name (which may hold spaces) in parentheses.
    static func nice(_ pid: Int32) -> Int? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 16 ? Int(fields[16]) : nil  // fields[0] is field 3 (state)
    }

    static func postmaster(_ cluster: LocalPostgres) -> Int32? {
        (try? String(contentsOfFile: cluster.clusterDirectory + "/postmaster.pid", encoding: .utf8))
            .flatMap { $0.split(separator: "\n").first.flatMap { Int32($0) } }
    }

    @Test func theClusterAndItsBackendsRunAtTheGivenNiceValue() async throws {
        let dir = NSTemporaryDirectory() + "bigpeer-nice-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var options = LocalPostgres.Options()
        options.ephemeral = true
        options.niceness = 7
        let cluster = try await TestPostgres.startCluster(dataDirectory: dir, options: options)
        try cluster.removeWhenProcessExits(alsoRemove: [dir])
        let pid = try #require(Self.postmaster(cluster))
        #expect(Self.nice(pid) == 7)
        let conn = try await PostgresConnection.connect(cluster.configuration(), on: TestLoops.group.next())
        let backend = try await conn.query("SELECT pg_backend_pid()")[0].decode(0, as: Int.self)
        #expect(Self.nice(Int32(backend)) == 7)
        await conn.close()
        try await cluster.restartOffPool()
        let restarted = try #require(Self.postmaster(cluster))
        #expect(restarted != pid && Self.nice(restarted) == 7)
        #expect(Self.nice(getpid()) == 0, "the server's own threads keep their priority")
        try await cluster.stopOffPool()  // (and the watchdog removes it if a #require stopped us first)
    }
}
