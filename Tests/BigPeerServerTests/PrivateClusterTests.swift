import BigPeerServer
import BigPeerTestSupport
import Foundation
import Glibc
import HTTP
import Postgres
import Sockets
import Testing
import Values

/// `bigpeer serve` processes on a private cluster under `--data-dir`, and a copied binary.
@Suite struct PrivateClusterTests {
    static func execute(_ client: HTTPClient, _ port: Int, _ statement: String) async throws -> (Int, Value) {
        let r = try await RESTClient(http: client, port: port).execute(statement)
        return (r.status, r.body)
    }

    /// True while something accepts PostgreSQL sessions as the superuser on the cluster's port.
    static func clusterAnswers(_ dir: String) async -> Bool {
        guard let port = (try? String(contentsOfFile: dir + "/postgres-port", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines),
              let password = (try? String(contentsOfFile: dir + "/postgres-password", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines),
              let config = try? PostgresConfiguration(url: "postgresql://\(LocalPostgres.superuser):\(password)@127.0.0.1:\(port)/postgres")
        else { return false }
        guard let conn = try? await PostgresConnection.connect(config, on: TestLoops.group.next()) else { return false }
        await conn.close()
        return true
    }

    /// Several instances share one data directory's cluster: stopping the one that started it
    /// leaves it up for the others, a SIGKILLed instance does not keep it up forever, and the last
    /// one to stop stops it. The URL printed for analysts is the read-only role's (item 10).
    @Test(.timeLimit(.minutes(5))) func clusterStaysUpWhileAnyInstanceUsesIt() async throws {
        let dir = NSTemporaryDirectory() + "bigpeer-shared-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let started = MutexBox<[ServerProcess]>([])
        do {
            try await Self.sharedClusterScenario(dir: dir, started: started)
        } catch {
            for server in started.withLock({ $0 }) { await server.kill() }  // none outlives a failed run
            throw error
        }
    }

    static func sharedClusterScenario(dir: String, started: MutexBox<[ServerProcess]>) async throws {
        let args = ["--data-dir", dir, "--insecure-dev"]
        func start() async throws -> ServerProcess {
            let server = try await ServerProcess.start(arguments: args, readyTimeout: .seconds(180))
            started.withLock { $0.append(server) }
            return server
        }
        let first = try await start()
        // Whatever happens below, the cluster is stopped and deleted when this test process exits.
        // (This object registers as a user too, and stops being one at once.)
        let guardian = try await TestPostgres.startCluster(dataDirectory: dir, options: LocalPostgres.Options())
        try guardian.removeWhenProcessExits(alsoRemove: [dir])
        try await guardian.stopOffPool()
        #expect(await Self.clusterAnswers(dir))

        let second = try await start()
        #expect(second.log().contains("reused-running-server=true"))
        let client = try HTTPClient()
        defer { Task { await client.shutdown() } }
        let (created, _) = try await Self.execute(client, second.port, "INSERT INTO shared DOCUMENTS ({_id: 'before', n: 1})")
        #expect(created == 200)

        // The instance that started the cluster stops; the other one goes on writing.
        await first.terminate()
        let (status, _) = try await Self.execute(client, second.port, "INSERT INTO shared DOCUMENTS ({_id: 'after', n: 2})")
        #expect(status == 200)
        let (readStatus, read) = try await Self.execute(client, second.port, "SELECT _id FROM shared ORDER BY _id")
        #expect(readStatus == 200)
        #expect(read["items"] == [["_id": "after"], ["_id": "before"]])

        // What was printed for psql and BI tools: the analyst role, read-only; never the superuser.
        let log = first.log() + second.log()
        let superuserPassword = try String(contentsOfFile: dir + "/postgres-password", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!log.contains(superuserPassword))
        let printed = try #require(log.split(separator: " ").first { $0.hasPrefix("analyst-url=") }).dropFirst("analyst-url=".count)
        #expect(printed.hasPrefix("postgresql://bigpeer_analyst:"))
        let analyst = try await PostgresConnection.connect(try PostgresConfiguration(url: String(printed)), on: TestLoops.group.next())
        let rows = try await analyst.query("SELECT _id FROM analytics.shared ORDER BY _id")
        #expect(try rows.map { try $0.decode(0, as: String.self) } == ["after", "before"])
        await #expect(throws: PostgresError.self) { _ = try await analyst.query("UPDATE documents SET value = NULL") }
        await #expect(throws: PostgresError.self) { _ = try await analyst.query("DELETE FROM analytics.shared") }
        await analyst.close()

        // A killed instance leaves a registration nobody holds: the last live one still stops the cluster.
        let killed = try await start()
        await killed.kill()
        #expect(await Self.clusterAnswers(dir))
        await second.terminate()
        #expect(await !Self.clusterAnswers(dir))
    }

    /// The binary carries its migrations and openapi.yaml: a copy started from an empty directory,
    /// far from any checkout, migrates a fresh database and serves the spec; `migrate` works too.
    @Test(.timeLimit(.minutes(3))) func copiedBinaryRunsFromAnEmptyDirectory() async throws {
        let place = NSTemporaryDirectory() + "bigpeer-copy-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let empty = place + "/empty"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: place) }
        let binary = place + "/bigpeer"
        let built = try ServerProcess.locateBinary()
        // A hard link when on one file system (instant), else a copy: either way no path leads back.
        if link(built, binary) != 0 { try FileManager.default.copyItem(atPath: built, toPath: binary) }
        let migrationFiles = EmbeddedResourcesTests.root + "/migrations"
        let expected = try FileManager.default.contentsOfDirectory(atPath: migrationFiles).filter { $0.hasSuffix(".sql") }.sorted()

        try await TestPostgres.withDatabase { db in
            var environment = ProcessInfo.processInfo.environment
            environment["BIGPEER_MIGRATIONS"] = nil
            environment["BIGPEER_OPENAPI"] = nil
            let server = try await ServerProcess.start(binary: binary, arguments: ["--database-url", db.url, "--insecure-dev"],
                                                       workingDirectory: empty, environment: environment)
            let client = try HTTPClient()
            do {
                let spec = try await client.get("http://127.0.0.1:\(server.port)/api/v4/openapi.yaml")
                #expect(spec.status.code == 200)
                #expect(spec.body == [UInt8](try #require(FileManager.default.contents(atPath: EmbeddedResourcesTests.root + "/openapi.yaml"))))
                let (status, _) = try await Self.execute(client, server.port, "INSERT INTO copied DOCUMENTS ({_id: 'x'})")
                #expect(status == 200)
            } catch {
                await client.shutdown()
                await server.kill()
                throw error
            }
            await client.shutdown()
            await server.terminate()
            let conn = try await db.connect()
            let applied = try await conn.query("SELECT name FROM schema_migrations ORDER BY version").map { try $0.decode(0, as: String.self) }
            await conn.close()
            #expect(applied == expected)
        }

        try await TestPostgres.withDatabase { db in
            let result = try await TestCommand.run("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" migrate --database-url \"$2\"", empty, binary, db.url])
            #expect(result.status == 0, "\(result.err)")
            #expect(result.out.contains("applied: " + expected.joined(separator: ", ")), "\(result.out)")
        }
    }
}
