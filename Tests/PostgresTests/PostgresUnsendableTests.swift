import BigPeerTestSupport
import Quoting
import Testing
import TestRandomness
@testable import Postgres

/// #16 items 3, 7, 8: what libpq cannot send faithfully is refused before sending, with
/// PostgreSQL's own SQLSTATE, and the session stays usable; quoting reads back byte for byte.
@Suite struct PostgresUnsendableTests {
    @Test func nulInATextBindIsRefusedNotCut() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            // Before the fix libpq sent "colB" (a C string ends at the NUL) and this returned it.
            do {
                let r = try await c.query("SELECT \("colB\u{0}x")::text")
                Issue.record("NUL bind was sent: \(try r[0].decode(0, as: String.self))")
            } catch let e as PostgresError {
                #expect(e.sqlState == "22021")
            }
            do {
                _ = try await c.query(PostgresQuery(unsafeSQL: "SELECT 'a\u{0}b'"))
                Issue.record("NUL in SQL text was sent")
            } catch let e as PostgresError {
                #expect(e.sqlState == "22021")
            }
            #expect(try await c.query("SELECT 1")[0].decode(0, as: Int.self) == 1)
        }
    }

    @Test func moreThan65535BindsIsAClientErrorNotABrokenSession() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let q = PostgresQuery(unsafeSQL: "SELECT " + (1...65_536).map { "$\($0)::int" }.joined(separator: "+"),
                              binds: (1...65_536).map { _ in 1.postgresBind })
            do {
                _ = try await c.query(q)
                Issue.record("sent")
            } catch let e as PostgresError {
                #expect(e.sqlState == "54023")
                #expect(!e.isUnavailable)  // before: a failed PQsend… marked the session broken (503)
            }
            #expect(try await c.query("SELECT 1")[0].decode(0, as: Int.self) == 1)
        }
    }

    /// Fuzz against PostgreSQL itself: a quoted literal and a quoted identifier read back as the
    /// exact bytes, including a quote followed by a combining mark (one Character in Swift).
    @Test func sqlQuotingReadsBackExactly() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            var rng = SeededRandom(seed: 16)
            let pieces = ["'", "\"", "\\", "\u{301}", "\u{E9}", "e", "K", "\u{212A}", "\n", "$$", ";", "--", "a", "\u{1F600}"]
            for round in 0..<300 {
                let s = (0..<Int.random(in: 1...10, using: &rng)).map { _ in pieces.randomElement(using: &rng)! }.joined()
                let name = String(decoding: s.utf8.prefix(60), as: UTF8.self)
                let sql = "SELECT " + Quote.sqlLiteral(s) + "::text AS " + Quote.sqlIdentifier(name == "" ? "x" : name)
                let rows = try await c.query(PostgresQuery(unsafeSQL: sql))
                #expect(Array(try rows[0].decode(0, as: String.self).utf8) == Array(s.utf8), "round \(round)")
            }
        }
    }
}
