// Where in-memory DQL work runs: the store's statements and the matching of sync subscriptions
// (docs/ARCHITECTURE.md, "In-memory evaluation").
//
// Requests run on event loops, and a loop serves every other connection it owns: a filter, sort or
// grouping that runs for a second there stalls them all (`/healthz` included). So every in-memory
// stage first runs inline with a small step budget (`onLoopSteps`, a few tenths of a millisecond);
// almost every request finishes within it and pays no thread hop. If the budget runs out, the
// inline attempt is dropped (evaluation is pure) and the stage runs again from the start on
// `workers`, threads of their own, with the statement's deadline. Past the
// deadline it fails with `.deadlineExceeded` (408), like a statement PostgreSQL cancels.

import CThreads
import Dispatch
import Glibc
import Synchronization
import Values

public enum InMemoryEvaluation {
    /// Steps an in-memory stage may take inline before it moves off the loop. A step is a byte read
    /// by a string function, an NFA state per scalar or an eighth of an expression node: 20,000
    /// take 0.1-0.8 ms on the loaded 2-core test machine. (100,000 was measured first: CPU bombs
    /// answered in a tight loop then cost a normal client 5x its idle p99, 20,000 3.8x;
    /// docs/performance-history.md, "Hostile mix".)
    public static let onLoopSteps = 20_000

    /// Steps one write statement (INSERT/UPDATE/DELETE/EVICT) may spend evaluating inline (its
    /// documents, SET expressions, the re-check of a locked document's WHERE): beyond, the
    /// statement fails with 400. At most ~0.5-2 s of a loop in a release build.
    public static let writeStatementSteps = 50_000_000

    /// Steps a sync subscription's WHERE may take for one document (initial pages and live
    /// changes alike; live matching runs inside the session's step, on its loop). A document that
    /// needs more does not match: the subscriber's own condition is too expensive, nobody else's.
    public static let subscriptionStepsPerDocument = 200_000

    /// Whether `document` matches a subscription's query within `subscriptionStepsPerDocument`,
    /// and the steps it took. Other evaluation errors are thrown.
    public static func subscriptionMatches(_ query: SelectQuery, _ document: Value) throws(DQLEvaluationError) -> (matches: Bool, steps: Int) {
        let budget = EvaluationBudget(maxSteps: subscriptionStepsPerDocument)
        do {
            return (try query.budgeted(budget).matches(document), budget.steps)
        } catch {
            if case .budgetExceeded = error { return (false, budget.steps) }
            throw error
        }
    }

    /// The threads heavy stages run on: one per core but one, of their own. Not a dispatch queue:
    /// on this platform a concurrent queue shares its threads with Swift's global executor, so two
    /// heavy statements starved every task of the process (measured: a test's client stalled for
    /// the whole 2 s timeout); and not the cooperative pool, for the same reason. One core is
    /// left to the event loops, PostgreSQL and everything else whatever heavy statements arrive:
    /// with a thread per core, CPU bombs on 2 cores cost a normal client 4.0-4.1 ms at p99, with
    /// one thread 2.8-2.9 ms, and more bombs were answered (docs/performance-history.md).
    static let workers = EvaluationWorkers(threads: evaluationThreads(cores: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))

    /// How many evaluation threads a machine with `cores` online cores gets: all but one, at least one.
    static func evaluationThreads(cores: Int) -> Int { max(1, cores - 1) }

    /// Stages `run` finished inline, and stages it moved off the loops, since the process
    /// started (`bigpeer_in_memory_stages_total`): how often statements are too heavy for a loop.
    public static let stagesInline = Atomic<Int>(0)
    public static let stagesMovedOffLoop = Atomic<Int>(0)

    /// Runs `work` inline with `onLoopSteps` (or `maxSteps` if smaller), and again off the loops
    /// with `maxSteps` if that was not enough. `work` must be pure: it may run twice.
    public static func run<T: Sendable>(deadline: ContinuousClock.Instant?, maxSteps: Int = .max,
                                        _ work: @escaping @Sendable (EvaluationBudget) throws -> T) async throws -> T {
        let inline = EvaluationBudget(maxSteps: min(onLoopSteps, maxSteps), deadline: deadline,
                                      exhaustion: maxSteps <= onLoopSteps ? .fail : .yield)
        do {
            let result = try work(inline)
            stagesInline.add(1, ordering: .relaxed)
            return result
        } catch DQLEvaluationError.sliceExhausted {
            // Too much for the loop: start over below.
        }
        stagesMovedOffLoop.add(1, ordering: .relaxed)
        return try await offLoop { try work(EvaluationBudget(maxSteps: maxSteps, deadline: deadline)) }
    }

    /// Whom the off-loop work of the current task is for: a credential (`key:…`, `jwt:…`) or a
    /// client address, set by the route or sync session that runs a statement. The evaluation
    /// threads take turns between tenants (`EvaluationWorkers`), so one client's heavy statements
    /// wait behind each other, not in front of everybody else's. nil: one shared tenant.
    @TaskLocal public static var tenant: Tenant?

    /// A tenant's name, worked out only when a stage of its task moves off the loop: naming a
    /// REST request's credential reads its token (a JWT's payload is decoded), which nearly every
    /// request, finishing inline, never needs.
    public struct Tenant: Sendable {
        private let resolve: @Sendable () -> String?
        public init(resolve: @escaping @Sendable () -> String?) { self.resolve = resolve }
        public init(_ name: String) { self.init(resolve: { name }) }
        public var name: String? { resolve() }
    }

    /// Stages waiting for an evaluation thread, and the tenants they belong to
    /// (`bigpeer_evaluation_queued_stages`, `bigpeer_evaluation_queued_tenants`).
    public static var queued: (stages: Int, tenants: Int) { workers.queued }

    /// Runs `work` on `workers`, in `tenant`'s turn, and returns its result to the caller's executor.
    public static func offLoop<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        let tenant = Self.tenant?.name
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            workers.submit(tenant: tenant) { continuation.resume(with: Result { try work() }) }
        }
    }
}

/// A fixed set of threads taking jobs from per-tenant FIFO queues in turn (`TenantQueues`), started
/// on first use and kept for the life of the process. At most `threads` heavy stages run at once.
final class EvaluationWorkers: Sendable {
    private let jobs = Mutex(TenantQueues<@Sendable () -> Void>())
    private let available = DispatchSemaphore(value: 0)
    private let threads: Int
    /// Threads running (nil until the first job).
    private let started = Mutex<Int?>(nil)

    init(threads: Int) { self.threads = threads }

    var queued: (stages: Int, tenants: Int) { jobs.withLock { ($0.count, $0.tenantCount) } }

    func submit(tenant: String?, _ job: @escaping @Sendable () -> Void) {
        guard startIfNeeded() > 0 else {
            job()  // no thread could be created (the process is at its limit): slower, but it runs
            return
        }
        jobs.withLock { $0.append(job, for: tenant) }
        available.signal()
    }

    private func startIfNeeded() -> Int {
        started.withLock { count in
            if let count { return count }
            let n = startThreads()
            count = n
            return n
        }
    }

    private func startThreads() -> Int {
        var n = 0
        for index in 0..<threads {
            let box = Unmanaged.passRetained(Start(workers: self, index: index)).toOpaque()
            var tid = pthread_t()
            let rc = pthread_create(&tid, nil, { arg in
                guard let arg else { return nil }
                let start = Unmanaged<Start>.fromOpaque(arg).takeRetainedValue()
                start.workers.work(index: start.index)
            }, box)
            if rc == 0 { pthread_detach(tid); n += 1 } else { Unmanaged<Start>.fromOpaque(box).release() }
        }
        return n
    }

    /// What a new thread needs: its workers and its number (for its name).
    private final class Start: Sendable {
        let workers: EvaluationWorkers
        let index: Int
        init(workers: EvaluationWorkers, index: Int) { self.workers = workers; self.index = index }
    }

    /// Niceness of the evaluation threads (Linux schedules threads by their own nice value): under
    /// CPU contention the event loops, at the process's own priority, go first, so a heavy
    /// statement slows itself down rather than every connection's latency.
    static let niceness: Int32 = 10

    private func work(index: Int) -> Never {
        _ = bp_set_thread_name("bp-eval-\(index)")
        // On Linux the nice value is per thread, and `who` 0 is the calling thread (setpriority(2)).
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, Self.niceness)
        // The kernel's default time slice: a thread inherits its creator's, and the first job
        // usually comes from an event loop, which asks for a short one (`EventLoop`).
        _ = bp_thread_request_slice(0)
        while true {
            available.wait()
            // One signal per job, so a job is there.
            if let job = jobs.withLock({ $0.next() }) { job() }
        }
    }
}

/// Jobs queued per tenant, taken in turn: round robin over the tenants that have jobs, FIFO within
/// one. A tenant with a thousand jobs queued delays another tenant's one job by one job, not by a
/// thousand. Every operation is O(1) amortized. Not thread-safe: `EvaluationWorkers` holds it in a
/// mutex.
struct TenantQueues<Job> {
    /// Each tenant's jobs, `head` the index of the next one (compacted when half is spent; a job
    /// taken is set to nil at once, so what it captured is not kept until then).
    private struct Queue {
        var jobs: [Job?] = []
        var head = 0
        var isEmpty: Bool { head == jobs.count }
    }
    private var queues: [String?: Queue] = [:]
    /// Tenants with jobs, in turn order; `turnHead` the next one's index.
    private var turns: [String?] = []
    private var turnHead = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }
    /// Tenants with jobs queued.
    var tenantCount: Int { turns.count - turnHead }

    mutating func append(_ job: Job, for tenant: String?) {
        if queues[tenant] == nil {
            queues[tenant] = Queue()
            turns.append(tenant)  // a tenant joins the rotation at the back
        }
        queues[tenant]!.jobs.append(job)
        count += 1
    }

    /// The next tenant's oldest job; that tenant goes to the back of the rotation if it has more.
    mutating func next() -> Job? {
        guard turnHead < turns.count else { return nil }
        let tenant = turns[turnHead]
        turnHead += 1
        // Out of the dictionary while it changes: no copy on write. A tenant in `turns` always has
        // a queue (`append` adds both, and a turn is given back only with jobs left).
        guard var queue = queues.removeValue(forKey: tenant) else { return next() }
        let job = queue.jobs[queue.head].take()
        queue.head += 1
        count -= 1
        if queue.isEmpty {
            // Forgotten: a tenant's memory here lasts only while it has jobs queued.
        } else {
            if queue.head * 2 >= queue.jobs.count {
                queue.jobs.removeFirst(queue.head)
                queue.head = 0
            }
            queues[tenant] = queue
            turns.append(tenant)
        }
        if turnHead * 2 >= turns.count {
            turns.removeFirst(turnHead)
            turnHead = 0
        }
        return job
    }
}
