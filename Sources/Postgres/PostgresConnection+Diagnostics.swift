import CLibPQ
import Sockets

extension PostgresConnection {
    /// What this session is doing, read on its loop: the backend, the statement in flight (its
    /// phase and SQL), whether libpq waits for the server, the transaction and pipeline status,
    /// and the socket interest. For timeout messages: it tells a statement the server runs from
    /// one that was never sent or whose answer was never read.
    public func diagnostics() async -> String {
        await withCheckedContinuation { (c: CheckedContinuation<String, Never>) in
            loop.execute { [self] in c.resume(returning: describeOnLoop()) }
        }
    }

    func describeOnLoop() -> String {
        guard let pg else { return "session closed" }
        let phase: String
        switch op?.phase {
        case nil: phase = "none"
        case .pipeline(let s)?: phase = "pipeline(\(s.slots.count) slots, at \(s.current))"
        case .preparing(let name, _)?: phase = "preparing(\(name))"
        case .results?: phase = "results"
        case .copyIn?: phase = "copyIn"
        case .copyOut?: phase = "copyOut"
        }
        return "pid \(PQbackendPID(pg)), op \(phase), busy \(PQisBusy(pg)), txn \(PQtransactionStatus(pg).rawValue), "
            + "pipeline \(PQpipelineStatus(pg).rawValue), interest \(interest.rawValue), registered \(registration != nil), "
            + "broken \(isBroken), last \(lastStatement.prefix(60))"
    }
}
