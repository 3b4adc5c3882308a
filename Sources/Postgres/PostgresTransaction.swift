/// Transaction isolation levels PostgreSQL offers.
public enum PostgresIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

extension PostgresPool {
    /// Runs `body` inside BEGIN … COMMIT on one session. Any error rolls back. A serialization
    /// failure (40001) or deadlock (40P01) — which PostgreSQL asks clients to retry — reruns the
    /// whole body, up to `maxAttempts` times with a short randomized backoff, so `body` must be
    /// safe to run again (it only touches the database through `conn`).
    public func withTransaction<R>(
        isolation: PostgresIsolation = .readCommitted,
        maxAttempts: Int = 5,
        _ body: (PostgresConnection) async throws -> R
    ) async throws -> R {
        try await withConnectionRetryingTransientFailures(maxAttempts: maxAttempts) { conn in
            try await conn.transaction(isolation: isolation, body)
        }
    }

    /// Runs `body` (one whole transaction) on a leased session, and again on a fresh lease after a
    /// serialization failure or deadlock, up to `maxAttempts` runs in all, sleeping a random
    /// 1…5·2ⁿ ms in between so the transactions that collided do not collide again in lockstep.
    func withConnectionRetryingTransientFailures<R>(
        maxAttempts: Int, _ body: (PostgresConnection) async throws -> R
    ) async throws -> R {
        var run = 1
        while true {
            do {
                return try await withConnection(body)
            } catch let error as PostgresError where error.isTransient && run < maxAttempts {
                run += 1
                let ms = Int.random(in: 1...(5 << min(run, 6)))
                try await Task.sleep(for: .milliseconds(ms))
            }
        }
    }
}

extension PostgresConnection {
    /// BEGIN … COMMIT on this session, ROLLBACK on any error (no retry: see `PostgresPool.withTransaction`).
    public func transaction<R>(isolation: PostgresIsolation = .readCommitted, _ body: (PostgresConnection) async throws -> R) async throws -> R {
        _ = try await query(PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation.rawValue)"))
        do {
            let r = try await body(self)
            _ = try await query("COMMIT")
            return r
        } catch {
            if !isBroken { _ = try? await query("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body` inside a SAVEPOINT: an error undoes only what `body` did, and the enclosing
    /// transaction goes on. Must be called inside a transaction.
    public func withSavepoint<R>(_ name: String = "bp_savepoint", _ body: (PostgresConnection) async throws -> R) async throws -> R {
        let quoted = PostgresQuery.quoteIdentifier(name)
        _ = try await query(PostgresQuery(unsafeSQL: "SAVEPOINT \(quoted)"))
        do {
            let r = try await body(self)
            _ = try await query(PostgresQuery(unsafeSQL: "RELEASE SAVEPOINT \(quoted)"))
            return r
        } catch {
            if !isBroken { _ = try? await query(PostgresQuery(unsafeSQL: "ROLLBACK TO SAVEPOINT \(quoted)")) }
            throw error
        }
    }
}
