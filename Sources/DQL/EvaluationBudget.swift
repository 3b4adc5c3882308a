// How much in-memory work one evaluation may do. Expressions are charged as they run: 8 steps per
// expression node, one per byte a string function reads, one per NFA state a regular expression
// visits per scalar, one per LIKE comparison, n·log2(n) for a sort. Whoever runs the evaluation
// decides what running out means:
//
// - `maxSteps` is a count that does not depend on the machine: a per-call budget (a sync
//   subscription's per-document match) or a slice (the store's first attempt on an event loop,
//   after which it moves the work to a thread of its own and starts again: `.sliceExhausted`).
// - `deadline` is the statement timeout: every 4,096 steps the clock is read, and past the
//   deadline the evaluation fails with `.deadlineExceeded` (HTTP 408).

import Synchronization

public final class EvaluationBudget: Sendable {
    /// What running out of `maxSteps` means for the caller.
    public enum Exhaustion: Sendable {
        /// The caller's limit for this evaluation: `.budgetExceeded` (a client error).
        case fail
        /// The caller will run the evaluation again elsewhere with more room: `.sliceExhausted`.
        case yield
    }

    public let maxSteps: Int
    public let deadline: ContinuousClock.Instant?
    public let exhaustion: Exhaustion
    private let used = Atomic<Int>(0)

    /// How many steps pass between two readings of the clock (a power of two).
    static let clockInterval = 4096
    /// What evaluating one expression node costs: ~100-300 ns measured, against ~5-20 ns for a
    /// byte of string work or an NFA state (docs/performance-history.md), so a step stays near 10-40 ns.
    public static let stepsPerNode = 8

    public init(maxSteps: Int = .max, deadline: ContinuousClock.Instant? = nil, exhaustion: Exhaustion = .fail) {
        self.maxSteps = maxSteps
        self.deadline = deadline
        self.exhaustion = exhaustion
    }

    /// Steps charged so far.
    public var steps: Int { used.load(ordering: .relaxed) }

    /// Charges `n` steps (n ≥ 0); throws when the budget or the deadline is exhausted.
    @inline(__always)
    public func charge(_ n: Int) throws(DQLEvaluationError) {
        // A load and a store, not a read-modify-write: an evaluation runs on one thread at a time,
        // and a lock-prefixed add per expression node cost ~40% of a simple WHERE over many rows.
        // (Were two threads ever to share a budget, some charges would be lost, nothing worse.)
        let before = used.load(ordering: .relaxed)
        let after = before &+ n
        used.store(after, ordering: .relaxed)
        if after > maxSteps || after < before {
            switch exhaustion {
            case .fail: throw .budgetExceeded(steps: maxSteps)
            case .yield: throw .sliceExhausted
            }
        }
        if deadline != nil, before / Self.clockInterval != after / Self.clockInterval {
            try checkDeadline()
        }
    }

    public func checkDeadline() throws(DQLEvaluationError) {
        if let deadline, ContinuousClock.now >= deadline { throw .deadlineExceeded }
    }
}

extension EvaluationContext {
    /// Charges the context's budget, if it has one.
    @inline(__always)
    func charge(_ n: Int) throws(DQLEvaluationError) {
        if let budget { try budget.charge(n) }
    }
}

extension Evaluator {
    /// The same evaluator under `budget` instead of its context's.
    public func budgeted(_ budget: EvaluationBudget?) -> Evaluator {
        var context = self.context
        context.budget = budget
        return Evaluator(context: context)
    }
}
