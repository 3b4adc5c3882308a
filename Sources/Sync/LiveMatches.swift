// Which rows of a change-log batch match a session's live subscriptions, worked out before the
// batch reaches the session (docs/ARCHITECTURE.md, "In-memory evaluation").
//
// The session's step runs on an event loop, under the session's lock. A peer's subscription may be
// as expensive as its per-document budget allows (200,000 steps), so a batch of k rows could cost
// that loop k × 200,000 steps — every other connection of the loop waiting meanwhile. So the
// driver (`SyncConnection.deliverLog`) first tries the whole batch inline within a loop's slice
// (nearly every batch fits), and otherwise works it out on the evaluation threads and delivers the
// batch when done: an expensive subscription delays its own session, not the loop.

import DQL
import SyncProtocol
import Values

/// A session's live subscriptions as a batch is matched against them: their queries by collection,
/// and which subscriptions (id and generation) they were.
struct LiveQueries: Sendable {
    var byCollection: [String: [SelectQuery]] = [:]
    var identity: [UInt32: UInt64] = [:]

    var isEmpty: Bool { byCollection.isEmpty }
}

/// The positions of a batch's rows whose value matches at least one live subscription, valid while
/// the session's live subscriptions are still `identity`.
struct LiveMatches: Sendable, Equatable {
    var identity: [UInt32: UInt64]
    var matching: Set<ChangeLogPosition>

    /// Checks each row as `SyncSession.matchesLive` does — every subscription on the row's
    /// collection with its own per-document budget, an evaluation error meaning "does not match" —
    /// and charges every step to `budget` as well: on a loop a slice (`.sliceExhausted` when the
    /// batch needs more), off it unbounded.
    static func compute(_ entries: [LogEntry], _ queries: LiveQueries, budget: EvaluationBudget) throws(DQLEvaluationError) -> LiveMatches {
        var matching = Set<ChangeLogPosition>(minimumCapacity: entries.count)
        for entry in entries {
            guard let value = entry.value, let candidates = queries.byCollection[entry.document.collection] else { continue }
            let outcome = firstMatch(value, candidates)
            try budget.charge(outcome.steps)
            if outcome.matches { matching.insert(entry.position) }
        }
        return LiveMatches(identity: queries.identity, matching: matching)
    }

    /// Whether `value` matches one of `queries`, each within its per-document budget (an
    /// evaluation error, or a check that needs more, means "does not match"), and the steps taken.
    static func firstMatch(_ value: Value, _ queries: some Sequence<SelectQuery>) -> (matches: Bool, steps: Int) {
        var steps = 0
        for query in queries {
            do {
                let outcome = try InMemoryEvaluation.subscriptionMatches(query, value)
                steps += outcome.steps
                if outcome.matches { return (true, steps) }
            } catch {
                steps += 1
            }
        }
        return (false, steps)
    }
}
