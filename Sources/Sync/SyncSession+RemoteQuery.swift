// Remote queries on the server side of a session (PROTOCOL.md §4.15): `.sendQuery` sends `query`
// to the peer and the peer's `result` comes back as `.queryAnswered`. Every query is answered
// exactly once: by the peer, or by the session itself when the peer cannot answer (not ready, no
// `query` capability, `maxOutstandingQueries` reached), did not answer in time (its deadline on
// the session's clock), answered with more than the query's `max` bytes, or when the session ends.

import SyncProtocol

/// A `query` sent and not yet answered.
struct PendingRemoteQuery: Sendable {
    var sentAt: UInt64
    var deadline: UInt64
    var maxResultBytes: UInt64

    func elapsed(_ now: UInt64) -> UInt64 { now >= sentAt ? now - sentAt : 0 }
}

extension SyncSession {
    /// Whether the peer announced that it answers `query` (`hello.caps`).
    public var peerAnswersQueries: Bool { peer?.capabilities.contains(SyncCapability.remoteQuery) ?? false }

    /// Remote queries sent and not answered yet.
    public var outstandingQueryCount: Int { remoteQueries.count }

    mutating func sendQuery(_ query: RemoteQuery, now: UInt64, into out: inout [SyncSessionAction]) {
        func refuse(_ code: RemoteQueryError.Code, _ message: String) {
            out.append(.queryAnswered(RemoteQueryResult(id: query.id, outcome: .failure(RemoteQueryError(code, message)))))
        }
        guard state == .ready else { return refuse(.sessionClosed, "the peer's session is not open") }
        guard peerAnswersQueries else { return refuse(.unsupported, "the peer does not support remote queries (its protocol predates them)") }
        guard remoteQueries[query.id] == nil else { return refuse(.busy, "a remote query with id \(query.id) is already outstanding") }
        guard remoteQueries.count < configuration.maxOutstandingQueries else {
            return refuse(.busy, "the peer has \(configuration.maxOutstandingQueries) remote queries outstanding already")
        }
        // The peer's answer must fit the server's largest message as well as the query's bound.
        var bounded = query
        bounded.maxResultBytes = max(RemoteQuery.minResultBytes, min(query.maxResultBytes, UInt64(configuration.limits.maxMessageSize)))
        let (deadline, overflow) = now.addingReportingOverflow(query.timeoutMillis)
        remoteQueries[query.id] = PendingRemoteQuery(sentAt: now, deadline: overflow ? .max : deadline, maxResultBytes: bounded.maxResultBytes)
        send(.query(bounded), capacity: 32 + query.statement.utf8.count, into: &out)
    }

    /// The peer's `result`. One for a query no longer outstanding (it timed out) is dropped.
    mutating func queryAnswered(_ result: RemoteQueryResult, size: Int, now: UInt64, into out: inout [SyncSessionAction]) {
        guard let pending = remoteQueries.removeValue(forKey: result.id) else { return }
        guard UInt64(size) <= pending.maxResultBytes else {
            let error = RemoteQueryError(.tooLarge, "the peer's result of \(size) bytes exceeds the limit of \(pending.maxResultBytes)")
            return out.append(.queryAnswered(RemoteQueryResult(id: result.id, outcome: .failure(error), elapsedMillis: pending.elapsed(now))))
        }
        out.append(.queryAnswered(result))
    }

    mutating func expireQueries(now: UInt64, into out: inout [SyncSessionAction]) {
        for (id, pending) in remoteQueries.sorted(by: { $0.key < $1.key }) where now >= pending.deadline {
            remoteQueries[id] = nil
            let error = RemoteQueryError(.timeout, "the peer did not answer within \(pending.deadline - pending.sentAt) ms")
            out.append(.queryAnswered(RemoteQueryResult(id: id, outcome: .failure(error), elapsedMillis: pending.elapsed(now))))
        }
    }

    mutating func answerPendingQueriesAtClose(now: UInt64, into out: inout [SyncSessionAction]) {
        for (id, pending) in remoteQueries.sorted(by: { $0.key < $1.key }) {
            let error = RemoteQueryError(.sessionClosed, "the peer's session ended before it answered")
            out.append(.queryAnswered(RemoteQueryResult(id: id, outcome: .failure(error), elapsedMillis: pending.elapsed(now))))
        }
        remoteQueries = [:]
    }
}
