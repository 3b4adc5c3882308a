import DQL
import Metrics
import Postgres
import Sockets
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
///
/// **Gathering the answered clients.** Only one batch runs at a time (the transaction counter
/// serializes commits anyway, docs/STORAGE.md), so clients that arrive while a batch runs wait for
/// the next one. Left alone, concurrent clients split into groups that take turns: with 8 clients,
/// the 4 answered by one batch come back while the next batch (the other 4) runs, and so on, so
/// every commit carries half of them and each client waits a whole extra batch. So after a batch
/// of more than one statement is answered, the next batch waits until as many statements as that
/// batch answered have joined the ones already queued — the answered clients coming back — or
/// until `gatherWindow` has passed since the answer, whichever comes first; then one commit
/// carries them all. This is PostgreSQL's `commit_delay` idea applied to our own batches: it only
/// applies under concurrency (a batch of one, e.g. a single client, never waits), and it bounds
/// the wait from the moment the previous clients were answered, so a client that does not come
/// back costs the others at most the window.
final class WriteBatcher: Sendable {
    struct Job: Sendable {
        enum Work: Sendable {
            /// A DQL write statement with its arguments.
            case statement(Statement, [String: Value])
            /// Sync uploads (and upstream downloads): CRDT deltas to merge, with the sending peer's
            /// site id as change-log origin, and the download checkpoints they bring this far.
            case merge([MergeItem], origin: Int64, checkpoints: DownloadCheckpoints?)
        }
        var work: Work
        var nowMillis: Int64
        /// The caller's write rules (docs/AUTH.md, "Write rules"): every document the job changes
        /// must match them before and after (`WriteTransaction.writeRules`).
        var writeRules: DocumentRules = .none
    }

    private struct Waiting {
        var job: Job
        var continuation: CheckedContinuation<ExecuteResult, any Error>
    }

    private struct State {
        var queue: [Waiting] = []
        var running = false
        /// Statements the last batch answered, when, and how many were queued at that moment.
        var answered = 0
        var answeredAt = ContinuousClock.now
        var queuedAtAnswer = 0
        /// The drain waiting for the answered clients (`gather`), released once the queue holds
        /// `gatherTarget` statements; `gatherID` tells its timer from a later wait's.
        var gatherer: CheckedContinuation<Void, Never>?
        var gatherTarget = 0
        var gatherID: UInt64 = 0
        /// Gathers that ended because the window passed, not because the clients came back.
        var windowsExpired = 0

        /// The gatherer to resume, when the queue has reached its target.
        mutating func releaseIfGathered() -> CheckedContinuation<Void, Never>? {
            guard gatherer != nil, queue.count >= gatherTarget else { return nil }
            defer { gatherer = nil }
            return gatherer
        }
    }

    private let state = Mutex(State())
    let maxBatch: Int
    /// How long after answering a batch the next one may wait for those clients (see above).
    /// PostgreSQL's `commit_delay` is in this range; here it is only spent when clients do not
    /// come back, and the event loop's timer may round it up to its 1 ms tick when nothing else
    /// wakes the loop.
    let gatherWindow: Duration

    static let defaultGatherWindow = Duration.microseconds(500)

    /// How many times a batch waited out the whole window (its answered clients did not all come
    /// back in time): what a lone writer must never cost.
    var windowsExpired: Int { state.withLock { $0.windowsExpired } }

    /// Statements per committed transaction (`bigpeer_write_batch_statements`).
    let batchSizes = Histogram(HistogramBuckets(bounds: [1, 2, 4, 8, 16, 32, 64, 128, 256]))
    /// Time from a batch's BEGIN to its COMMIT's answer (`bigpeer_write_transaction_seconds`).
    let transactionTime = Histogram(.latency)

    init(maxBatch: Int = 256, gatherWindow: Duration = WriteBatcher.defaultGatherWindow) {
        self.maxBatch = maxBatch
        self.gatherWindow = gatherWindow
    }

    func submit(_ job: Job, store: DocumentStore) async throws -> ExecuteResult {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<ExecuteResult, any Error>) in
            let (start, gathered) = state.withLock { s -> (Bool, CheckedContinuation<Void, Never>?) in
                s.queue.append(Waiting(job: job, continuation: cont))
                if s.running { return (false, s.releaseIfGathered()) }
                s.running = true
                return (true, nil)
            }
            gathered?.resume()
            // The drain runs on the submitter's event loop (an HTTP handler's or sync session's):
            // a plain `Task` would run on the global pool, and every database round trip of the
            // transaction would then resume there — two thread switches each — instead of on the
            // loop that owns the session.
            if start {
                let loop = store.pool.callersLoop
                // A batch holds many clients' writes: its evaluation is nobody's in particular
                // (the shared tenant), not the turn of whichever request started the drain.
                Task(executorPreference: loop) { await InMemoryEvaluation.$tenant.withValue(nil) { await self.drain(store) } }
            }
        }
    }

    /// Runs batches until the queue is empty. Exactly one drain runs at a time.
    private func drain(_ store: DocumentStore) async {
        while true {
            await gather(store)
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

    /// Records a batch of `count` statements about to be answered. Called before the first
    /// continuation is resumed: a client answered here may submit again at once, and must not
    /// be counted among the statements queued before the answer (the target would then be out
    /// of reach and every batch would wait the whole window).
    private func answering(_ count: Int) {
        state.withLock { s in
            s.answered = count
            s.answeredAt = .now
            s.queuedAtAnswer = s.queue.count
        }
    }

    /// Waits, when the last batch answered several statements recently, until that many more have
    /// been queued since, or until `gatherWindow` after the answer (see the type's comment).
    private func gather(_ store: DocumentStore) async {
        let loop = store.pool.callersLoop
        await withCheckedContinuation { (cont: CheckedContinuation<Void, Never>) in
            let wait = state.withLock { s -> (UInt64, Duration)? in
                guard s.answered > 1 else { return nil }
                let remaining = gatherWindow - s.answeredAt.duration(to: .now)
                let target = min(maxBatch, s.queuedAtAnswer + s.answered)
                guard remaining > .zero, s.queue.count < target else { return nil }
                s.gatherID &+= 1
                s.gatherer = cont
                s.gatherTarget = target
                return (s.gatherID, remaining)
            }
            guard let (id, remaining) = wait else { return cont.resume() }
            loop.execute {
                loop.scheduleTimer(after: remaining) {
                    let late = self.state.withLock { s -> CheckedContinuation<Void, Never>? in
                        guard s.gatherID == id, let g = s.gatherer else { return nil }
                        s.gatherer = nil
                        s.windowsExpired += 1
                        return g
                    }
                    late?.resume()
                }
            }
        }
    }

    private func run(_ batch: [Waiting], _ store: DocumentStore) async {
        do {
            let began = NanoTime.now()
            let (results, txn) = try await store.runInTransaction(batch.map(\.job))
            transactionTime.observe(NanoTime.now().duration(since: began))
            batchSizes.observe(UInt64(batch.count))
            answering(batch.count)
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
                answering(1)
                batch[0].continuation.resume(throwing: StoreError.from(error))
            } else {
                for w in batch { await run([w], store) }  // isolate the statement that broke the transaction
            }
        }
    }
}
