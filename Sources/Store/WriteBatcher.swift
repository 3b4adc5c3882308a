import DQL
import Postgres
import Synchronization
import Values

/// Group commit: write statements that arrive while a transaction is running wait for it, then run
/// together in the next one, so many small concurrent writes share one commit (one WAL flush).
///
/// Each statement stays all-or-nothing: a statement first reads and computes everything (DQL and
/// CRDT errors surface here, before it writes anything), then writes. A statement that fails in
/// that first phase just reports its error. A database error aborts the shared transaction; the
/// batch is then rerun one statement per transaction, so one bad statement cannot fail others.
/// Nothing is acknowledged before its transaction has committed.
final class WriteBatcher: Sendable {
    struct Job: Sendable {
        enum Work: Sendable {
            /// A DQL write statement with its arguments.
            case statement(Statement, [String: Value])
            /// Sync uploads: CRDT deltas to merge, with the uploading peer's site id as change-log origin.
            case merge([MergeItem], origin: Int64)
        }
        var work: Work
        var nowMillis: Int64
    }

    private struct Waiting {
        var job: Job
        var continuation: CheckedContinuation<ExecuteResult, any Error>
    }

    private struct State {
        var queue: [Waiting] = []
        var running = false
    }

    private let state = Mutex(State())
    let maxBatch: Int

    init(maxBatch: Int = 256) { self.maxBatch = maxBatch }

    func submit(_ job: Job, store: DocumentStore) async throws -> ExecuteResult {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<ExecuteResult, any Error>) in
            let start = state.withLock { s -> Bool in
                s.queue.append(Waiting(job: job, continuation: cont))
                if s.running { return false }
                s.running = true
                return true
            }
            // The drain runs on the submitter's event loop (an HTTP handler's or sync session's):
            // a plain `Task` would run on the global pool, and every database round trip of the
            // transaction would then resume there — two thread switches each — instead of on the
            // loop that owns the session.
            if start {
                let loop = store.pool.callersLoop
                Task(executorPreference: loop) { await self.drain(store) }
            }
        }
    }

    /// Runs batches until the queue is empty. Exactly one drain runs at a time.
    private func drain(_ store: DocumentStore) async {
        while true {
            let batch = state.withLock { s -> [Waiting] in
                let n = min(maxBatch, s.queue.count)
                let b = Array(s.queue.prefix(n))
                s.queue.removeFirst(n)
                if b.isEmpty { s.running = false }
                return b
            }
            if batch.isEmpty { return }
            await run(batch, store)
        }
    }

    private func run(_ batch: [Waiting], _ store: DocumentStore) async {
        do {
            let (results, txn) = try await store.runInTransaction(batch.map(\.job))
            for (w, r) in zip(batch, results) {
                switch r {
                case .success(var outcome):
                    outcome.transactionID = txn
                    w.continuation.resume(returning: outcome)
                case .failure(let e):
                    w.continuation.resume(throwing: e)
                }
            }
        } catch {
            if batch.count == 1 {
                batch[0].continuation.resume(throwing: StoreError.from(error))
            } else {
                for w in batch { await run([w], store) }  // isolate the statement that broke the transaction
            }
        }
    }
}
