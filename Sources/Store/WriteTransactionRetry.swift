import Postgres
import Synchronization
import Values

extension PostgresError {
    /// A unique violation on `documents`' primary key. In a write transaction only a plain INSERT
    /// can raise it (every other write to `documents` is an upsert of a row we hold locked), and
    /// that INSERT only creates `_id`s the transaction found absent under lock: so it means another
    /// transaction created one of those documents after we looked and has committed. Rerunning
    /// the transaction finds that row and locks it like any other.
    var isConcurrentDocumentCreation: Bool {
        guard case .server(let e) = self else { return false }
        return e.sqlState == "23505" && e.constraint == "documents_pkey"
    }
}

extension DocumentStore {
    /// How many times a write transaction runs before a concurrent creation of its documents is
    /// reported to the client instead of retried (see `withWriteTransaction`).
    static let creationAttempts = 8

    /// Runs a write transaction (`pool.withPipelinedTransaction`, which already retries
    /// serialization failures and deadlocks) and reruns it from the start — re-reading and
    /// re-merging every document — when another transaction created one of the documents it was
    /// creating (`isConcurrentDocumentCreation`). That failure aborts the transaction before its
    /// COMMIT (the INSERT precedes COMMIT in the same pipeline), so nothing of the failed attempt is
    /// visible and nothing was acknowledged; `body` must be safe to rerun (it only touches the
    /// database through the transaction it is given).
    ///
    /// Each retry means some other writer committed a creation of one of our `_id`s, which the
    /// next attempt sees and locks: retries are bounded by the racing creators, not by chance. The
    /// bound (`creationAttempts`) only stops pathological loops (a document created and evicted
    /// over and over); it surfaces as `StoreError.conflict` (409), with nothing written.
    ///
    /// A transaction that assumed a remembered setting which another transaction has since changed
    /// (`isSettingChanged`, before anything was written) is rerun the same way, reading it afresh.
    func withWriteTransaction<R>(_ body: (PostgresPipelinedTransaction) async throws -> R) async throws -> R {
        var attempt = 1
        while true {
            do {
                return try await pool.withPipelinedTransaction(body)
            } catch let error as PostgresError where error.isSettingChanged && attempt < Self.creationAttempts {
                // The remembered strict mode is stale (WriteSettings.swift): nothing was written;
                // the rerun reads the setting instead of assuming it.
                forgetRememberedSettings()
                attempt += 1
            } catch let error as PostgresError where error.isConcurrentDocumentCreation {
                if attempt >= Self.creationAttempts {
                    throw StoreError.conflict(
                        "documents of this write were created by other writers at the same moment \(attempt) times in a row; nothing was written, retry the request")
                }
                attempt += 1
                // The winner has committed: retry at once, with a little jitter against a third writer.
                if attempt > 2 { try await Task.sleep(for: .milliseconds(Int.random(in: 1...(1 << min(attempt, 7))))) }
            }
        }
    }
}

extension DocumentStore {
    /// Runs `body`'s statements in one write transaction (`withWriteTransaction`), commits it
    /// (`WriteTransaction.finish`), and hands the commit to the change feed — the one place this
    /// instance announces a commit (`ChangeFeed.committed`), before the caller answers anyone.
    /// Returns `body`'s result and the transaction number.
    func commitWrite<R>(_ body: (PostgresPipelinedTransaction) async throws -> (R, WriteTransaction)) async throws -> (R, Int64) {
        // Commits sent by the attempts below, settled (handed over or failed) when this returns:
        // a notification of one may reach the feed before `committed` (`OwnCommits.outcome`).
        var sending = 0
        defer { changeFeed.ownCommitsSettled(sending) }
        let (result, committed, registered) = try await withWriteTransaction { db in
            let (result, written) = try await body(db)
            var tx = written
            sending += 1
            changeFeed.ownCommitSending()
            return (result, try await tx.finish(), tx.registeredCollections)
        }
        changeFeed.committed(committed)
        // Only now, after commit: a rolled-back registration must be tried again next time.
        knownCollections.withLock { $0.formUnion(registered.map { ExactString($0) }) }
        return (result, committed.transaction)
    }
}
