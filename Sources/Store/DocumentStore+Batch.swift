import CRDT
import DQL
import Postgres
import Synchronization
import Values

/// Why `executeBatch` did nothing: the statement at `index` failed (nil when the failure is not
/// one statement's, e.g. the database went away or the commit failed).
public struct StoreBatchError: Error, Sendable, CustomStringConvertible {
    public var index: Int?
    public var error: StoreError

    public init(index: Int?, error: StoreError) {
        self.index = index
        self.error = error
    }

    public var description: String {
        if let index { return "statement \(index + 1) failed: \(error.description); nothing was written" }
        return error.description
    }
}

extension DocumentStore {
    /// Runs several write statements in one PostgreSQL transaction, all or nothing: either every
    /// statement's effects commit together under one transaction number, or (when any statement
    /// fails) none of them does. Results are in statement order and share that transaction number.
    ///
    /// This bypasses the group-commit `WriteBatcher` on purpose: the batcher isolates a failing
    /// statement by rerunning the others, which is exactly what an atomic batch must not do. It
    /// uses the same `WriteTransaction` (read-merge-write under row locks, change log, counter).
    /// Only writes are accepted (INSERT, UPDATE, DELETE, EVICT); others fail with `.invalid`.
    /// `writeRules` apply to every statement as in `executeStreaming`.
    public func executeBatch(_ statements: [(statement: Statement, arguments: [String: Value])],
                             writeRules: DocumentRules = .none, minimumTransaction: Int64? = nil,
                             transactionWait: Duration = .seconds(5)) async throws(StoreBatchError) -> [ExecuteResult] {
        for (i, item) in statements.enumerated() {
            switch item.statement {
            case .insert, .update, .delete, .evict: continue
            default: throw StoreBatchError(index: i, error: .invalid("a batch holds only INSERT, UPDATE, DELETE and EVICT statements, not \(item.statement.queryType)"))
            }
        }
        if statements.isEmpty { return [] }
        let now = Int64(Replica.systemMillis())
        let jobs = statements.map {
            WriteBatcher.Job(work: .statement(writeRules.restrictingWrites($0.statement), $0.arguments), nowMillis: now, writeRules: writeRules)
        }
        do {
            if let minimumTransaction { try await waitForTransaction(minimumTransaction, within: transactionWait) }
            let (results, txn) = try await commitWrite { db in
                var tx = WriteTransaction(store: self, db: db, strictMode: try await self.strictMode(in: db))
                var results: [ExecuteResult] = []
                for (i, job) in jobs.enumerated() {
                    do {
                        results.append(try await tx.run(job))
                    } catch let e as PostgresError {
                        throw e  // keep it recognisable so withTransaction retries deadlocks and serialization failures
                    } catch {
                        throw StoreBatchError(index: i, error: StoreError.from(error))  // rolls back everything
                    }
                }
                return (results, tx)
            }
            return results.map { r in
                var r = r
                r.transactionID = txn
                return r
            }
        } catch let e as StoreBatchError {
            throw e
        } catch {
            throw StoreBatchError(index: nil, error: StoreError.from(error))
        }
    }
}
