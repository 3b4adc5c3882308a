// The server's remote queries on a small peer (PROTOCOL.md §4.15; run only when the sync client
// allows them, `SyncClient.Configuration.allowRemoteQueries`): one SELECT over the local store,
// as `execute` would run it, under an evaluation budget so a hostile query cannot hold the peer's
// lock (and its sync loop) for long.

import DQL
import Synchronization
import SyncProtocol
import Values

extension SmallPeer {
    /// Evaluation steps one remote query may take (about a second of work; EvaluationBudget.swift).
    static let remoteQuerySteps = 50_000_000

    /// Runs `query` if it is a SELECT: its items, or why not. Never writes.
    func runRemoteQuery(_ query: RemoteQuery) -> (Result<[Value], RemoteQueryError>, warnings: [String]) {
        let select: SelectStatement
        do {
            guard case .select(let s) = try DQL.parse(query.statement) else {
                return (.failure(RemoteQueryError(.invalidQuery, "only SELECT statements may run as remote queries")), [])
            }
            select = s
        } catch {
            return (.failure(RemoteQueryError(.invalidQuery, SmallPeerError.syntax(error).description)), [])
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(clamping: query.timeoutMillis))
        let budget = EvaluationBudget(maxSteps: Self.remoteQuerySteps, deadline: deadline)
        let context = EvaluationContext(arguments: query.arguments, nowMilliseconds: Int64(clamping: configuration.wallClock()),
                                        strictMode: configuration.strictMode, budget: budget)
        do {
            let result = try state.withLock { s throws(SmallPeerError) in
                guard s.storage != nil else { throw .closed }
                return try s.store.select(select, context: context)
            }
            return (.success(result.items), result.warnings)
        } catch {
            return (.failure(RemoteQueryError(.failed, error.description)), [])
        }
    }
}
