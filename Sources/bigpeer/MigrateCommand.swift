import ArgumentParser
import BigPeerServer
import Logging
import Postgres
import Sockets

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Apply pending schema migrations and exit (serve also does this at start).")

    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let logger = Logger(label: "bigpeer.migrate")
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        let source = DatabaseSource.resolve(databaseURL: database.databaseURL, dataDirectory: database.dataDirectory)
        do {
            let db = try await Database.open(source, migrationsDirectory: database.migrationsDirectory, loop: group.next(), logger: logger)
            let r = db.migrationReport
            print("applied: \(r.applied.isEmpty ? "none" : r.applied.joined(separator: ", "))")
            print("already applied: \(r.alreadyApplied.count)")
            try db.localCluster?.stop()
        } catch let e as PostgresError {
            throw ValidationError(e.debugDescription)
        }
    }
}
