import BigPeerTestSupport
import CThreads
import Dispatch
@testable import DQL
import Glibc
import Synchronization
import Testing
import Values
@testable import Store

/// Where in-memory DQL work runs and when it stops (docs/ARCHITECTURE.md, "In-memory evaluation").
@Suite struct InMemoryEvaluationTests {
    static func query(_ text: String, _ args: [String: Value] = [:]) throws -> SelectQuery {
        guard case .select(let s) = try DQL.parse(text) else { throw DQLEvaluationError.invalidStatement("not a SELECT") }
        return try SelectQuery(s, context: EvaluationContext(arguments: args))
    }

    static var thread: UInt { UInt(pthread_self()) }

    @Test func cheapWorkStaysOnTheCallersThreadAndHeavyWorkMovesOff() async throws {
        let docs: [Value] = (0..<10).map { ["_id": .string("d\($0)"), "n": .int(Int64($0))] }
        let q = try Self.query("SELECT * FROM c WHERE n > 4 ORDER BY n DESC")
        let caller = Self.thread
        let cheap = try await InMemoryEvaluation.run(deadline: nil) { budget in (try q.budgeted(budget).run(docs), Self.thread, budget.steps) }
        #expect(cheap.0.count == 5)
        #expect(cheap.1 == caller)
        #expect(cheap.2 > 0 && cheap.2 < InMemoryEvaluation.onLoopSteps)

        // ~60 instructions × 6,000 scalars: a few times the slice.
        let subject = String(repeating: "a", count: 6_000) + "b"
        let heavy = try Self.query("SELECT * FROM c WHERE regexp_like(s, :p)", ["p": "(a|a){1,20}$x"])
        let ran = try await InMemoryEvaluation.run(deadline: nil) { budget in
            (try heavy.budgeted(budget).run([["s": .string(subject)]]), Self.thread, budget.steps, getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0))
        }
        #expect(ran.0.isEmpty)
        #expect(ran.1 != caller, "a stage beyond the slice must run on an evaluation thread")
        #expect(ran.2 > InMemoryEvaluation.onLoopSteps)
        // At a lower priority than the caller's thread (the loops), which keeps its own.
        #expect(ran.3 == EvaluationWorkers.niceness)
        #expect(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) < EvaluationWorkers.niceness)
    }

    @Test func evaluationThreads_leaveOneCoreToTheLoops() {
        #expect(InMemoryEvaluation.evaluationThreads(cores: 1) == 1)
        #expect(InMemoryEvaluation.evaluationThreads(cores: 2) == 1)
        #expect(InMemoryEvaluation.evaluationThreads(cores: 16) == 15)
    }

    /// Workers started by a thread with a short slice (as an event loop's is) are named, niced
    /// and take the kernel's default slice back: with the loop's slice they would preempt the
    /// loops they are meant to yield to.
    @Test func anEvaluationThread_isNamed_niced_andDoesNotKeepItsCreatorsShortSlice() throws {
        let workers = EvaluationWorkers(threads: 1)
        let defaultSlice = CurrentThread.slice
        let seen = Mutex<(String, Int32, UInt64?)?>(nil)
        let done = DispatchSemaphore(value: 0)
        _ = bp_thread_request_slice(150_000)  // this thread creates the worker: it inherits this
        let honoured = CurrentThread.slice == 150_000
        workers.submit(tenant: nil) {
            seen.withLock { $0 = (CurrentThread.name, getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0), CurrentThread.slice) }
            done.signal()
        }
        _ = bp_thread_request_slice(0)
        done.wait()
        let (name, nice, slice) = try #require(seen.withLock { $0 })
        #expect(name == "bp-eval-0")
        #expect(nice == EvaluationWorkers.niceness)
        if honoured { #expect(slice == defaultSlice) }
    }

    @Test func thePastDeadlineFailsTheStageAsATimeout() async throws {
        let subject = String(repeating: "a", count: 60_000) + "b"
        let heavy = try Self.query("SELECT * FROM c WHERE regexp_like(s, :p)", ["p": "(a|a){1,50}$x"])
        await #expect(throws: DQLEvaluationError.deadlineExceeded) {
            _ = try await InMemoryEvaluation.run(deadline: ContinuousClock.now + .milliseconds(1)) { budget in
                try heavy.budgeted(budget).run(Array(repeating: ["s": .string(subject)], count: 1_000))
            }
        }
        #expect(StoreErrorCase(StoreError.from(DQLEvaluationError.deadlineExceeded)) == .timeout)
        #expect(StoreErrorCase(StoreError.from(DQLEvaluationError.budgetExceeded(steps: 1))) == .invalid)
    }

    /// Sync subscriptions (live matching runs inside the session's step, on its loop): a WHERE
    /// that needs more than its per-document budget does not match, and costs at most that budget.
    @Test func aSubscriptionConditionBeyondItsBudgetDoesNotMatch() throws {
        let subject = String(repeating: "a", count: 60_000) + "b"
        let bomb = try Self.query("SELECT * FROM c WHERE regexp_like(s, :p)", ["p": "(a|a){1,900}$x"])
        let result = try InMemoryEvaluation.subscriptionMatches(bomb, ["s": .string(subject)])
        #expect(result.matches == false)
        #expect(result.steps <= InMemoryEvaluation.subscriptionStepsPerDocument + 8_192)
        // An ordinary condition is unaffected.
        let plain = try Self.query("SELECT * FROM c WHERE regexp_like(s, '^a+b$') AND s LIKE '%ab'")
        #expect(try InMemoryEvaluation.subscriptionMatches(plain, ["s": .string(String(repeating: "a", count: 1_000) + "b")]).matches)
    }
}
