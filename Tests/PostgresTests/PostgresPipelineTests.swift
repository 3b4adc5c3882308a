import BigPeerTestSupport
import Foundation
import Testing
@testable import Postgres

/// Pipelines (several statements, one round trip), the pipelined transaction built on them, and
/// array parameters in binary format (what the store's bulk writes send).
@Suite struct PostgresPipelineTests {
    @Test func pipeline_returnsOneResultPerStatement_inOrder_andPreparesOnce() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            var prepared: PostgresQuery = "SELECT \(Int64(40)) + 2"
            prepared.prepared = true
            let results = try await c.pipeline(["SELECT 1", prepared, "SELECT \("x") || 'y'", prepared])
            #expect(results.count == 4)
            #expect(try results[0][0].decode(0, as: Int.self) == 1)
            #expect(try results[1][0].decode(0, as: Int.self) == 42)
            #expect(try results[2][0].decode(0, as: String.self) == "xy")
            #expect(try results[3][0].decode(0, as: Int.self) == 42)
            // The statement was prepared in the pipeline, once, and is reused by a plain query.
            #expect(await c.preparedCount() == 1)
            #expect(try await c.query(prepared)[0].decode(0, as: Int.self) == 42)
            #expect(await c.preparedCount() == 1)
            #expect(try await c.pipeline([]).isEmpty)
        }
    }

    @Test func pipeline_stopsAtTheFirstError_andTheSessionStaysUsable() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE t (v int PRIMARY KEY)")
            await #expect {
                _ = try await c.pipeline([
                    "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (3)",
                ])
            } throws: { error in
                guard case .server(let e)? = error as? PostgresError else { return false }
                return e.sqlState == "23505"
            }
            // Outside a transaction block the pipeline was one implicit transaction: all rolled back,
            // and the statement after the failure never ran.
            #expect(try await c.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 0)
            #expect(c.isIdleOutsideTransaction)
            let again = try await c.pipeline(["INSERT INTO t VALUES (5)", "SELECT count(*) FROM t"])
            #expect(try again[1][0].decode(0, as: Int.self) == 1)
        }
    }

    @Test func pipelinedTransaction_commitsHeldStatements_inCallOrder() async throws {
        try await TestDatabase.run { db in
            let pool = db.makePool()
            _ = try await pool.query("CREATE TABLE t (seq int, v text)")
            let n = try await pool.withPipelinedTransaction { tx -> Int in
                try await tx.enqueue("INSERT INTO t VALUES (1, \("a"))")
                try await tx.enqueue("INSERT INTO t VALUES (2, \("b"))")
                // A statement whose result is needed sees what was held before it.
                let seen = try await tx.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self)
                try await tx.enqueue("UPDATE t SET v = v || '!' WHERE seq = 2")
                let last = try await tx.commit(after: "SELECT string_agg(v, ',' ORDER BY seq) FROM t")
                #expect(try last?[0].decode(0, as: String.self) == "a,b!")
                #expect(tx.isCommitted)
                return seen
            }
            #expect(n == 2)
            #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 2)
            // Returning without commit(after:) commits what is held.
            try await pool.withPipelinedTransaction { tx in try await tx.enqueue("INSERT INTO t VALUES (3, 'c')") }
            #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 3)
        }
    }

    @Test func pipelinedTransaction_heldFailureAbortsEverything_atTheNextRoundTrip() async throws {
        try await TestDatabase.run { db in
            let pool = db.makePool()
            _ = try await pool.query("CREATE TABLE t (v int PRIMARY KEY)")
            await #expect(throws: PostgresError.self) {
                try await pool.withPipelinedTransaction { tx in
                    try await tx.enqueue("INSERT INTO t VALUES (1)")
                    try await tx.enqueue("INSERT INTO t VALUES (1)")  // fails, reported by commit
                    try await tx.commit(after: "INSERT INTO t VALUES (2)")
                    Issue.record("commit must not return after a held statement failed")
                }
            }
            #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 0)
            // A failure in the body after statements were sent rolls them back too.
            struct Boom: Error {}
            await #expect(throws: Boom.self) {
                try await pool.withPipelinedTransaction { tx in
                    _ = try await tx.query("INSERT INTO t VALUES (7) RETURNING v")
                    throw Boom()
                }
            }
            #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 0)
            #expect(pool.openConnections >= 1)
        }
    }

    @Test func pipelinedTransaction_flushesEarly_pastItsThreshold() async throws {
        try await TestDatabase.run { db in
            let pool = db.makePool()
            _ = try await pool.query("CREATE TABLE t (v text)")
            try await pool.withPipelinedTransaction { tx in
                tx.flushThreshold = 1000
                let big = String(repeating: "x", count: 600)
                try await tx.enqueue("INSERT INTO t VALUES (\(big))")
                #expect(tx.heldCount == 2)  // BEGIN + the insert
                try await tx.enqueue("INSERT INTO t VALUES (\(big))")
                #expect(tx.heldCount == 0)  // went out: 1200 bytes held > 1000
            }
            #expect(try await pool.query("SELECT count(*) FROM t")[0].decode(0, as: Int.self) == 2)
        }
    }

    @Test func binaryArrayParameters_roundTrip_everyElementType() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let blobs = PostgresArray<PostgresBytea>([PostgresBytea([0, 1, 255]), nil, PostgresBytea([])])
            let jsons = PostgresArray<PostgresJSON>([PostgresJSON(#"{"k":"ünï \"q\" \\"}"#), nil])
            let ints = PostgresArray<Int32>([Int32.min, nil, 7])
            let smalls: [Int16] = [-3, Int16.max]
            let bigs: [Int] = [Int.min, 0, Int.max]
            let r = try await c.query("""
                SELECT \(blobs), \(jsons), \(ints), \(smalls), \(bigs), \([Double.infinity, -0.5]),
                       \(PostgresArray<String>([])), \(PostgresArray<PostgresBytea>([])), \([Bool]())
                """)[0]
            // bytea comes back in hex text form: compare through the server's own rendering.
            #expect(try r.decode(0, as: String.self) == #"{"\\x0001ff",NULL,"\\x"}"#)
            #expect(try r.decode(1, as: PostgresArray<PostgresJSON>.self).elements.map { $0?.text } == [#"{"k": "ünï \"q\" \\"}"#, nil])
            #expect(try r.decode(2, as: PostgresArray<Int32>.self).elements == [Int32.min, nil, 7])
            #expect(try r.decode(3, as: [Int16].self) == smalls)
            #expect(try r.decode(4, as: [Int].self) == bigs)
            #expect(try r.decode(5, as: [Double].self) == [Double.infinity, -0.5])
            #expect(try r.decode(6, as: [String].self) == [])
            #expect(try r.decode(7, as: String.self) == "{}")
            #expect(try r.decode(8, as: [Bool].self) == [])
            // Text the server must refuse still gets a typed error, not a crash.
            await #expect(throws: PostgresError.self) {
                _ = try await c.query("SELECT \(PostgresArray<PostgresJSON>([PostgresJSON("{not json")])))")
            }
        }
    }
}
