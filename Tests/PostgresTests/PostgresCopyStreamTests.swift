import BigPeerTestSupport
import Synchronization
import Testing
import TestRandomness
@testable import Postgres

/// `PostgresConnection.copyIn(_:from:)`: one COPY fed piece by piece by an async source.
@Suite struct PostgresCopyStreamTests {
    struct SourceFailed: Error, Equatable { var piece: Int }

    /// Pieces of text-format rows: ids `first ..< first + rows`.
    static func piece(from first: Int, rows: Int) -> [UInt8] {
        var out: [UInt8] = []
        for i in first..<first + rows { out += Array("\(i)\tname \(i)\n".utf8) }
        return out
    }

    static func piece(_ k: Int, rows: Int) -> [UInt8] { piece(from: k * rows, rows: rows) }

    /// Rows in piece k: some pieces (~0.8 MB) larger than a socket buffer, most ~8 KB.
    static func size(_ k: Int) -> Int { k % 7 == 0 ? 40_000 : 500 }

    /// Every piece arrives once, in order, whatever the timing of the source (seeded delays, some
    /// pieces larger than the socket's buffer), and the source is never asked twice at once.
    @Test(.timeLimit(.minutes(1)))
    func everyPieceArrivesInOrder() async throws {
        try await TestDatabase.run { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE streamed (id int8, name text)")
            let pieces = 40
            let state = Mutex((next: 0, firstID: 0, inCall: false, overlapped: false, rng: SeededRandom(seed: 11)))
            let r = try await c.copyIn("COPY streamed (id, name) FROM STDIN") {
                let (k, firstID, delay) = state.withLock { s in
                    if s.inCall { s.overlapped = true }
                    s.inCall = true
                    let k = s.next, firstID = s.firstID
                    s.next += 1
                    s.firstID += Self.size(k)
                    return (k, firstID, Int.random(in: 0...3, using: &s.rng))
                }
                if delay > 0 { try await Task.sleep(for: .milliseconds(delay)) }
                defer { state.withLock { $0.inCall = false } }
                guard k < pieces else { return nil }
                return Self.piece(from: firstID, rows: Self.size(k))
            }
            let rows = (0..<pieces).reduce(0) { $0 + Self.size($1) }
            #expect(r.affectedRows == rows)
            #expect(!state.withLock { $0.overlapped })
            // Ids are contiguous per piece and pieces are in order: ids ascend in insertion order.
            let ok = try await c.query("""
                SELECT bool_and(id > prev) FROM (SELECT id, lag(id, 1, -1::int8) OVER (ORDER BY ctid) AS prev FROM streamed) t
                """)
            #expect(try ok[0].decode(0, as: Bool.self))
            #expect(try await c.query("SELECT count(DISTINCT id) FROM streamed")[0].decode(0, as: Int.self) == rows)
        }
    }

    /// Pieces ready at once and about the socket's size, so the pump often finds libpq still
    /// sending the previous one and must wait for writability: a piece must never be left
    /// waiting without a wake-up (a bulk INSERT once hung that way: the socket drained between
    /// two checks, and nothing watched for writability any more). A stress check: the window is
    /// microseconds wide, and three runs against the code with the hang all passed, so this
    /// guards the path rather than proving the fix (`awaitWritable` does, by construction).
    @Test(.timeLimit(.minutes(1)))
    func piecesReadyWhileThePreviousIsStillSendingAllArrive() async throws {
        try await TestDatabase.run { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE eager (id int8, name text)")
            for round in 0..<3 {
                let state = Mutex((next: 0, firstID: 0, rng: SeededRandom(seed: UInt64(round))))
                let pieces = 150
                let r = try await c.copyIn("COPY eager (id, name) FROM STDIN") {
                    state.withLock { s -> [UInt8]? in
                        guard s.next < pieces else { return nil }
                        s.next += 1
                        let rows = Int.random(in: 3_000...60_000, using: &s.rng)  // ~50 KB to ~1 MB
                        defer { s.firstID += rows }
                        return Self.piece(from: s.firstID, rows: rows)
                    }
                }
                let total = state.withLock { $0.firstID }
                #expect(r.affectedRows == total)
                #expect(try await c.query("SELECT count(*) FROM eager")[0].decode(0, as: Int.self) == total)
                _ = try await c.query("TRUNCATE eager")
            }
        }
    }

    /// A source that throws abandons the COPY: the caller gets the source's own error, none of the
    /// rows stay, the transaction is aborted (as after any failed statement), and the session
    /// works after ROLLBACK.
    @Test(.timeLimit(.minutes(1)))
    func aFailingSourceAbandonsTheCopy() async throws {
        try await TestDatabase.run { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE abandoned (id int8, name text)")
            _ = try await c.query("BEGIN")
            let next = Mutex(0)
            await #expect(throws: SourceFailed(piece: 3)) {
                _ = try await c.copyIn("COPY abandoned (id, name) FROM STDIN") {
                    let k = next.withLock { n in defer { n += 1 }; return n }
                    if k == 3 { throw SourceFailed(piece: 3) }
                    return Self.piece(k, rows: 1000)
                }
            }
            await #expect(throws: PostgresError.self) { _ = try await c.query("SELECT 1") }  // 25P02: aborted
            _ = try await c.query("ROLLBACK")
            #expect(try await c.query("SELECT count(*) FROM abandoned")[0].decode(0, as: Int.self) == 0)
        }
    }

    /// Bad data in a later piece is the server's error (not a hang), and the session stays usable.
    @Test(.timeLimit(.minutes(1)))
    func badDataInALaterPieceIsTheServersError() async throws {
        try await TestDatabase.run { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            _ = try await c.query("CREATE TABLE bad (id int8, name text)")
            let next = Mutex(0)
            await #expect(throws: PostgresError.self) {
                _ = try await c.copyIn("COPY bad (id, name) FROM STDIN") {
                    let k = next.withLock { n in defer { n += 1 }; return n }
                    guard k < 20 else { return nil }
                    return k == 12 ? Array("not a number\tx\n".utf8) : Self.piece(k, rows: 2000)
                }
            }
            #expect(try await c.query("SELECT count(*) FROM bad")[0].decode(0, as: Int.self) == 0)
            #expect(!c.isBroken)
            // libpq keeps the COPY open while the server's early error waits unread: every later
            // piece is still sent (and discarded by the server), and the error is read at the end.
            #expect(next.withLock { $0 } == 21)
        }
    }
}
