import BigPeerTestSupport
import Testing
import TestRandomness
@testable import Postgres

/// Every way a statement's continuation is resumed: a result, a server error, `close` while it
/// runs, the session dying under it, and refusal before sending (busy session). Each must resume
/// its caller exactly once (the connection uses unchecked continuations, so a path that forgot to
/// resume would hang the test and one that resumed twice would crash it).
@Suite struct PostgresConnectionTests {
    @Test func closeFailsTheStatementInFlightWithShutDown() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            let observer = try await db.connect()
            defer { Task { await observer.close() } }
            let sleeper = Task { try await c.query("SELECT pg_sleep(30) -- close-in-flight") }
            try await waitUntilRunning(observer, "close-in-flight")
            await c.close()
            await #expect {
                _ = try await sleeper.value
            } throws: { e in
                guard case PostgresError.shutDown = e else { return false }
                return true
            }
            #expect(c.isBroken)
        }
    }

    @Test func aTerminatedBackendFailsTheStatementInFlightAndBreaksTheSession() async throws {
        try await TestPostgres.withDatabase { db in
            let victim = try await db.connect()
            let killer = try await db.connect()
            defer { Task { await killer.close(); await victim.close() } }
            let pid = try await victim.query("SELECT pg_backend_pid()")[0].decode(0, as: Int32.self)
            let sleeper = Task { try await victim.query("SELECT pg_sleep(30) -- terminated-in-flight") }
            try await waitUntilRunning(killer, "terminated-in-flight")
            _ = try await killer.query("SELECT pg_terminate_backend(\(pid))")
            await #expect {
                _ = try await sleeper.value
            } throws: { e in
                (e as? PostgresError)?.isUnavailable == true
            }
            // The FATAL error and the closed socket may arrive in either order; both break the session.
            #expect(await eventually { victim.isBroken })
            await #expect(throws: PostgresError.self) { _ = try await victim.query("SELECT 1") }
        }
    }

    @Test func aSecondStatementOnABusySessionIsRefusedAndTheFirstCompletes() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            let observer = try await db.connect()
            defer { Task { await c.close(); await observer.close() } }
            // The first statement waits for a lock the observer holds, not for a fixed time: on a
            // loaded machine a 2 s sleep once ended before the second statement was sent.
            _ = try await observer.query("SELECT pg_advisory_lock(4242)")
            let first = Task { try await c.query("SELECT 7 FROM pg_advisory_lock(4242) -- busy-session") }
            try await waitUntilRunning(observer, "busy-session")
            await #expect {
                _ = try await c.query("SELECT 1")
            } throws: { e in
                guard case PostgresError.protocolViolation = e else { return false }
                return true
            }
            _ = try await observer.query("SELECT pg_advisory_unlock(4242)")
            #expect(try await first.value[0].decode(0, as: Int.self) == 7)
            #expect(try await c.query("SELECT 8")[0].decode(0, as: Int.self) == 8)
        }
    }

    @Test func aPreparedStatementThatFailsToPrepareIsNotCached() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            var bad: PostgresQuery = "SELECT nosuchcolumn FROM pg_class WHERE oid = \(Int32(1))"
            bad.prepared = true
            for _ in 0..<2 {
                await #expect(throws: PostgresError.self) { _ = try await c.query(bad) }
            }
            #expect(await c.preparedCount() == 0)
            var good: PostgresQuery = "SELECT \(Int64(41)) + 1"
            good.prepared = true
            for _ in 0..<3 { #expect(try await c.query(good)[0].decode(0, as: Int.self) == 42) }
            #expect(await c.preparedCount() == 1)
        }
    }

    @Test func simpleProtocolRunsSeveralStatementsAndReturnsTheLast() async throws {
        try await TestPostgres.withDatabase { db in
            let c = try await db.connect()
            defer { Task { await c.close() } }
            let r = try await c.simpleQuery(unsafeSQL: "CREATE TEMP TABLE t (v int); INSERT INTO t VALUES (1), (2); SELECT sum(v) FROM t")
            #expect(try r[0].decode(0, as: Int.self) == 3)
        }
    }

    /// Waits until `observer` (another session, connected before the statement started: a
    /// connection made after it may come too late for a short statement on a loaded machine) sees
    /// a statement containing `marker` running, so a test acts while it is really in flight.
    private func waitUntilRunning(_ observer: PostgresConnection, _ marker: String) async throws {
        let pattern = "%" + marker + "%"
        let running = try await eventually {
            let r = try await observer.query(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE \(pattern) AND pid <> pg_backend_pid()")
            return try r[0].decode(0, as: Int.self) > 0
        }
        #expect(running, "statement \(marker) never started")
    }

    // MARK: - Bind layout (no server)

    @Test func bindPointersAreNulTerminatedCopiesWithParallelArrays() {
        let binds = [
            PostgresBind(type: PostgresType.text, text: "héllo"),
            PostgresBind(null: PostgresType.int8),
            PostgresBind(type: PostgresType.bytea, binary: [0, 1, 0, 255]),
            PostgresBind(type: PostgresType.text, text: ""),
        ]
        withBindPointers(binds) { types, values, lengths, formats in
            guard let types, let values, let lengths, let formats else {
                Issue.record("nil arrays for four binds")
                return
            }
            #expect((0..<4).map { types[$0] } == [PostgresType.text, PostgresType.int8, PostgresType.bytea, PostgresType.text])
            #expect((0..<4).map { formats[$0] } == [0, 0, 1, 0])
            #expect((0..<4).map { lengths[$0] } == [6, 0, 4, 0])
            #expect(values[1] == nil)
            guard let v0 = values[0], let v2 = values[2], let v3 = values[3] else {
                Issue.record("a non-NULL bind has no pointer")
                return
            }
            #expect(String(cString: v0) == "héllo")  // reads to the NUL, as libpq does for text
            #expect((0..<5).map { UInt8(bitPattern: v2[$0]) } == [0, 1, 0, 255, 0])
            #expect(v3.pointee == 0)
        }
        withBindPointers([]) { types, values, lengths, formats in
            #expect(types == nil && values == nil && lengths == nil && formats == nil)
        }
    }

    @Test func manyLargeBindsAreLaidOutWithoutOverlap() {
        // Past the stack threshold of withUnsafeTemporaryAllocation, so the heap path runs too.
        var random = SeededRandom(seed: 7)
        let payloads: [[UInt8]] = (0..<40).map { i in
            (0..<(i * 97 % 3000)).map { _ in UInt8.random(in: 1...255, using: &random) }
        }
        let binds = payloads.map { PostgresBind(type: PostgresType.bytea, binary: $0) }
        withBindPointers(binds) { _, values, lengths, _ in
            guard let values, let lengths else { Issue.record("nil arrays"); return }
            for (i, p) in payloads.enumerated() {
                #expect(Int(lengths[i]) == p.count)
                guard let v = values[i] else { Issue.record("bind \(i) has no pointer"); continue }
                let copy = UnsafeRawBufferPointer(start: v, count: p.count)
                #expect(Array(copy) == p)
                #expect(v[p.count] == 0)
            }
        }
    }
}
