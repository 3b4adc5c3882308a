import BigPeerTestSupport
import Store
import Testing
import Values
import Postgres
@testable import Sync
@testable import SyncProtocol

/// Initial sync with pages read ahead, on a real PostgreSQL, while a writer inserts (before and
/// after the page being read), updates and deletes documents of the collection.
@Suite struct PipelinedInitialSyncTests {
    static func id(_ n: Int) -> String { "d" + String(repeating: "0", count: max(0, 4 - String(n).count)) + String(n) }

    /// The test database's backends: state, wait event, the last statement and its age.
    static func activity(_ store: DocumentStore) async -> [String] {
        let sql: PostgresQuery = """
            SELECT pid::text, state, wait_event, left(query, 80), (now() - query_start)::text
            FROM pg_stat_activity WHERE datname = current_database()
            """
        guard let rows = try? await store.pool.query(sql) else { return ["(no answer)"] }
        return rows.map { row in (0..<5).map { (try? row.decode($0, as: String?.self)) ?? nil }.map { $0 ?? "NULL" }.joined(separator: " | ") }
    }

    @Test func pagesReadAhead_underAConcurrentWriter_sendEachDocumentOnce_inIDOrder_andThePeerConverges() async throws {
        try await withSyncServer { store, _ in
            // 240 documents d0000, d0010, ..., d2390; the writer adds d…5 between them.
            for batch in 0..<4 {
                let docs = (batch * 60..<(batch + 1) * 60).map { "({'_id': '\(Self.id($0 * 10))', 'n': \($0)})" }
                _ = try await store.execute("INSERT INTO bench DOCUMENTS " + docs.joined(separator: ", "))
            }
            let peer = TestPeer(site: 501)  // pages of 2 rows: ~120 page reads
            try await peer.connect(store: store)
            // The writer's progress: a hang in a write must not pass for a stalled sync (or hang
            // the test with no word of where it stands).
            let progress = MutexBox<(steps: Int, done: Bool)>((0, false))
            let writer = Task { () async throws -> Int64 in
                var last: Int64 = 0
                defer { progress.withLock { $0.done = true } }
                for step in 0..<60 {
                    let k = step * 37 % 240  // 37 is prime to 240: every k differs
                    let statement = switch step % 3 {
                    case 0: "INSERT INTO bench DOCUMENTS ({'_id': '\(Self.id(k * 10 + 5))', 'n': \(k), 'inserted': true})"
                    case 1: "UPDATE bench SET n = n + 1000 WHERE _id = '\(Self.id(k * 10))'"
                    default: "DELETE FROM bench WHERE _id = '\(Self.id(k * 10))'"
                    }
                    last = max(last, try await store.execute(statement).transactionID)
                    progress.withLock { $0.steps = step + 1 }
                    try await Task.sleep(for: .milliseconds(2))
                }
                return last
            }
            await peer.send(.subscribe(Subscribe(id: 1, query: "SELECT * FROM bench")))
            // About 120 page reads, each two statements: on a loaded machine (a full suite on two
            // cores) that takes far longer than any one wait, so the wait lasts while pages keep
            // arriving and fails on a stall (no message for 10 s) with the full dump: session,
            // page-read stages, pool, each leased session, every thread's stack, and the backends.
            do {
                _ = try await peer.waitFor(atMost: .seconds(120)) { if case .synced(1, _) = $0 { true } else { false } }
            } catch {
                Issue.record("PostgreSQL backends: \(await Self.activity(store))")
                writer.cancel()
                _ = try? await writer.value
                await peer.disconnect()
                throw error
            }
            // The writer too may take long on a loaded machine; it hangs if a write takes 60 s.
            var deadline = ContinuousClock.now + .seconds(60)
            var steps = progress.withLock { $0.steps }
            while !progress.withLock({ $0.done }) {
                let now = progress.withLock { $0.steps }
                if now != steps { steps = now; deadline = ContinuousClock.now + .seconds(60) }
                guard ContinuousClock.now < deadline else {
                    Issue.record("the writer hangs after \(progress.withLock { $0.steps }) of 60 writes")
                    writer.cancel()
                    await peer.disconnect()
                    return
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            let last = try await writer.value
            try await peer.waitForCheckpoint(last)

            // The pages: every document at most once, in id order (each page after the one before).
            var paged: [String] = []
            for case .documents(1, let entries) in await peer.messages() {
                for e in entries { if case .string(let s) = e.document.id { paged.append(s) } }
            }
            #expect(paged == paged.sorted() && Set(paged).count == paged.count)
            #expect(paged.count >= 200)
            // The peer holds exactly what the server holds (deleted documents: nothing or a tombstone).
            let server = try await store.execute("SELECT * FROM bench").items
            var expected: [String: Value] = [:]
            for v in server { if case .string(let s)? = v["_id"] { expected[s] = v } }
            #expect(expected.count > 240 - 20)
            var all = Set(expected.keys)
            for ref in await peer.docs.keys { if case .string(let s) = ref.id { all.insert(s) } }
            for s in all.sorted() {
                let mine = await peer.value(DocumentRef(collection: "bench", id: .string(s)))
                #expect(mine == expected[s], "\(s)")
            }
            guard let conn = await peer.connection else { Issue.record("no connection"); return }
            let (ahead, reads) = conn.inspect { ($0.pagesReadAhead, $0.pageReads.count) }
            #expect(ahead > 10, "pages were read ahead")
            #expect(reads == 0)
            await peer.disconnect()
        }
    }
}
