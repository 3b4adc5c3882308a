import BigPeerTestSupport
import CRDT
import Postgres
import TestRandomness
import Testing
import Values
@testable import Store

/// `WriteBatcher` gathers the clients a batch answered into the next batch (bounded by its
/// window): many concurrent writers stay exact, numbered in commit order without gaps, commit
/// together instead of in alternating groups, and a lone writer never waits.
@Suite struct GroupCommitGatherTests {
    /// A store whose batcher gathers for `window` (the tests use long windows, so that whether the
    /// answered clients are gathered does not depend on how loaded the machine is).
    func withGatheringStore(window: Duration, _ body: (DocumentStore) async throws -> Void) async throws {
        try await TestPostgres.withDatabase { db in
            try await db.migrate()
            let pool = db.makePool()
            let site = try await pool.query("SELECT site_id FROM bigpeer_identity")[0].decode(0, as: Int64.self)
            try await body(DocumentStore(pool: pool, site: SiteID(UInt64(bitPattern: site)), gatherWindow: window))
        }
    }

    /// 8 clients, each 10 UPDATEs one after another, alternating its own document and one shared
    /// by all, each pausing 2-12 ms after an answer (a client's own turnaround: network, parsing).
    /// Every increment counts once; each client sees its transaction numbers strictly increase;
    /// the change log's numbers are gap-free and exactly the acknowledged ones. And the clients
    /// answered together commit together: once a batch of all 8 was answered, the next one waits
    /// for all 8 to come back (the window is far longer than their pause), so the 80 statements
    /// take about 10 commits (a few more while the clients first fall into step). Without
    /// gathering, the first client back starts the next batch alone and the others queue behind
    /// it: two or more commits per round.
    @Test func concurrentUpdates_exactGapFreeAndCommittedTogether() async throws {
        try await withGatheringStore(window: .seconds(30)) { store in
            let clients = 8, rounds = 10
            _ = try await store.execute("INSERT INTO g DOCUMENTS ({_id: 'shared', n: 0})")
            for i in 0..<clients { _ = try await store.execute("INSERT INTO g DOCUMENTS ({_id: 'own\(i)', n: 0})") }
            let first = try await store.currentTransaction()
            let seen = try await withThrowingTaskGroup(of: [Int64].self) { group in
                for i in 0..<clients {
                    group.addTask {
                        var random = SeededRandom(seed: UInt64(i + 1))
                        var txns: [Int64] = []
                        for r in 0..<rounds {
                            if r > 0 { try await Task.sleep(for: .milliseconds(2 + random.below(11))) }
                            let id = r % 2 == 0 ? "own\(i)" : "shared"
                            let result = try await store.execute("UPDATE g SET n = n + 1 WHERE _id = :id", arguments: ["id": .string(id)])
                            #expect(result.mutatedDocumentIDs == [.string(id)])
                            txns.append(result.transactionID)
                        }
                        return txns
                    }
                }
                var all: [[Int64]] = []
                for try await txns in group { all.append(txns) }
                return all
            }
            for txns in seen { #expect(zip(txns, txns.dropFirst()).allSatisfy { $0 < $1 }) }
            let acknowledged = Set(seen.joined())
            #expect(acknowledged.allSatisfy { $0 > first })
            #expect(acknowledged.count <= rounds + 4)
            // Exact counts: each client's own document 5 times, the shared one 8 × 5 times.
            let values = try await store.items("SELECT _id, n FROM g")
            for i in 0..<clients { #expect(values.contains(["_id": .string("own\(i)"), "n": 5])) }
            #expect(values.contains(["_id": "shared", "n": .int(Int64(clients * rounds / 2))]))
            // The change log: one row per update, numbered first+1 ... last without a gap, and the
            // numbers are exactly those the clients were given.
            let rows = try await store.pool.query("SELECT txn FROM change_log WHERE txn > \(first) ORDER BY txn, seq")
                .map { try $0.decode(0, as: Int64.self) }
            #expect(rows.count == clients * rounds)
            let logged = Array(Set(rows)).sorted()
            #expect(logged == Array((first + 1)...(first + Int64(logged.count))))
            #expect(Set(logged) == acknowledged)
            #expect(try await store.currentTransaction() == logged.last)
        }
    }

    /// A single client is never held back (a batch of one does not gather): 40 writes one after
    /// another, and no batch waits out the window (a wait would end by the window's timer, which
    /// counts it, whatever the machine's load).
    @Test func aLoneClientNeverWaits() async throws {
        try await withGatheringStore(window: .seconds(30)) { store in
            for i in 0..<20 { _ = try await store.execute("INSERT INTO lone DOCUMENTS ({_id: 'l\(i)'})") }
            for i in 0..<20 { _ = try await store.execute("UPDATE lone SET v = \(i) WHERE _id = 'l\(i)'") }
            #expect(store.batcher.windowsExpired == 0)
            #expect(try await store.items("SELECT COUNT(*) AS n FROM lone WHERE v >= 0") == [["n": 20]])
        }
    }

    /// Clients that were answered together and do not come back cost the next writer at most the
    /// window: after a burst of concurrent writers (answered in batches of several), one more write
    /// still commits, once the window has passed.
    @Test(.timeLimit(.minutes(5))) func aWriterAfterABurstCommitsOnceTheWindowPasses() async throws {
        try await withGatheringStore(window: .milliseconds(300)) { store in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<16 {
                    group.addTask { _ = try await store.execute("INSERT INTO burst DOCUMENTS ({_id: 'b\(i)', n: 0})") }
                }
                try await group.waitForAll()
            }
            // Without the window's timer this statement would wait forever (the time limit fails it).
            let r = try await store.execute("UPDATE burst SET n = 1 WHERE _id = 'b3'")
            #expect(r.mutatedDocumentIDs == ["b3"])
            #expect(try await store.items("SELECT n FROM burst WHERE _id = 'b3'") == [["n": 1]])
            #expect(try await store.items("SELECT COUNT(*) AS n FROM burst") == [["n": 16]])
        }
    }
}
