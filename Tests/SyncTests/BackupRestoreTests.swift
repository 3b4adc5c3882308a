import BigPeerTestSupport
import CRDT
import Foundation
import Postgres
import Store
import Testing
import Values
@testable import Sync
@testable import SyncProtocol

/// The backup and restore procedure of docs/OPERATIONS.md, with the real `pg_dump` and
/// `pg_restore`: a peer synced past the backup resumes on the restored database. The counter
/// (`bigpeer_txn`) must be moved past the lost database's head before serving, or later writes
/// reuse transaction numbers the peer's checkpoint already covers and it never receives them.
@Suite struct BackupRestoreTests {
    static let car1 = DocumentRef(collection: "cars", id: "car-1")
    static let car3 = DocumentRef(collection: "cars", id: "car-3")

    /// What a peer kept from the lost database: its checkpoint, its documents, and the lost head.
    struct PeerBeforeRestore {
        var checkpoint: Int64
        var held: [DocumentRef: Document]
        var lostHead: Int64
    }

    @Test func withTheCounterMovedPastTheLostHead_aResumingPeerReceivesEveryChangeAfterTheRestore() async throws {
        try await withRestoredBackup(moveCounter: true) { store, before in
            let t1 = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-3', 'color': 'green'})").transactionID
            let t2 = try await store.execute("UPDATE cars SET speed = 1 WHERE _id = 'car-1'").transactionID
            #expect(t1 > before.lostHead, "numbers after the restore are new")
            let peer = try await resume(before, on: store)
            try await peer.waitForCheckpoint(t2)
            let changed = await changedDocuments(peer)
            #expect(changed.contains(Self.car3) && changed.contains(Self.car1), "both changes made after the restore arrive: \(changed)")
            #expect(await peer.value(Self.car3) == (try await store.execute("SELECT * FROM cars WHERE _id = 'car-3'").items.first))
            await peer.disconnect()
        }
    }

    /// Why the procedure moves the counter: without it, the restored database numbers its next
    /// transactions as the lost one did, the peer's checkpoint looks reachable, and the resume
    /// skips what was written after the restore.
    @Test func withoutMovingTheCounter_aResumingPeerSkipsWritesMadeAfterTheRestore() async throws {
        try await withRestoredBackup(moveCounter: false) { store, before in
            var head: Int64 = 0
            var n = 0
            while head < before.lostHead {
                n += 1
                head = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': :id, 'color': 'green'})",
                                               arguments: ["id": .string("car-\(2 + n)")]).transactionID
            }
            #expect(head == before.lostHead, "one transaction per insert, from the backup's head")
            let peer = try await resume(before, on: store)
            #expect(await changedDocuments(peer).isEmpty, "the checkpoint already covers the new numbers")
            #expect(await peer.value(Self.car3) == nil, "car-3, written after the restore, never arrives")
            await peer.disconnect()
        }
    }

    // MARK: - The procedure

    /// A database with two cars and a backup taken after the first; a peer syncs everything, then
    /// the database is lost and the backup restored into a new one (`moveCounter`: with
    /// `UPDATE bigpeer_txn SET n = GREATEST(n, lost head)` run before serving, as documented).
    func withRestoredBackup(moveCounter: Bool, _ body: (DocumentStore, PeerBeforeRestore) async throws -> Void) async throws {
        let dir = try TemporaryDirectory("bigpeer-restore")
        let backup = dir.path + "/backup.dump"
        let before = try await TestPostgres.withDatabase { original in
            try await original.migrate()
            var before = PeerBeforeRestore(checkpoint: 0, held: [:], lostHead: 0)
            try await withSyncServer(on: original) { store, _ in
                _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-1', 'color': 'red'})")
                try await Self.postgresTool("pg_dump", ["-Fc", "-f", backup], original)
                _ = try await store.execute("INSERT INTO cars DOCUMENTS ({'_id': 'car-2', 'color': 'red'})")
                before.lostHead = try await store.execute("UPDATE cars SET color = 'blue' WHERE _id = 'car-1'").transactionID
                let peer = TestPeer(site: 601)
                try await peer.connect(store: store)
                await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars")))
                _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
                try await peer.waitForCheckpoint(before.lostHead)
                before.checkpoint = await peer.checkpoint
                before.held = await peer.docs
                await peer.disconnect()
            }
            return before
        }
        try await TestPostgres.withDatabase { restored in
            try await Self.postgresTool("pg_restore", ["--no-owner", "--exit-on-error", "-d", restored.name, backup], restored)
            if moveCounter {
                let db = try await restored.connect()
                _ = try await db.query("UPDATE bigpeer_txn SET n = GREATEST(n, \(before.lostHead))")
                await db.close()
            }
            try await withSyncServer(on: restored) { store, _ in try await body(store, before) }
        }
    }

    /// The peer comes back with its documents and resumes its subscription from its checkpoint.
    func resume(_ before: PeerBeforeRestore, on store: DocumentStore) async throws -> TestPeer {
        let peer = TestPeer(site: 601)
        await peer.adoptAll(before.held)
        try await peer.connect(store: store)
        let have = before.held.keys.map { DocumentHash.of($0) }.sorted()
        await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM cars", checkpoint: before.checkpoint, have: have)))
        _ = try await peer.waitFor { if case .synced(1, _) = $0 { true } else { false } }
        return peer
    }

    func changedDocuments(_ peer: TestPeer) async -> Set<DocumentRef> {
        var refs: Set<DocumentRef> = []
        for message in await peer.messages() {
            switch message {
            case .changes(_, let entries): refs.formUnion(entries.map(\.document))
            case .documents(_, let entries): refs.formUnion(entries.map(\.document))
            default: break
            }
        }
        return refs
    }

    /// Runs a PostgreSQL client program from the server's installation against `db` (connection
    /// parameters through libpq's environment variables, so no password is on a command line).
    static func postgresTool(_ name: String, _ args: [String], _ db: TestDatabase) async throws {
        let bin = try LocalPostgres.findBinaries()
        var env = ProcessInfo.processInfo.environment
        for (key, variable) in [("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("password", "PGPASSWORD"),
                                ("dbname", "PGDATABASE"), ("sslmode", "PGSSLMODE")] {
            if let value = db.configuration[key] { env[variable] = value }
        }
        let out = try await TestCommand.run(bin + "/" + name, args, environment: env)
        guard out.status == 0 else { throw RestoreTestError.tool(name, out.status, out.err) }
    }

    enum RestoreTestError: Error { case tool(String, Int32, String) }
}
