// Remote queries on the peer side of a session (PROTOCOL.md §4.15): the server's `query` becomes a
// `.remoteQuery` action for the driver, which runs it on its local store and hands the outcome to
// `answerQuery`; the session sends it as `result`, cut to the query's `max` bytes. A peer that
// does not allow remote queries (`RemoteQuerySupport.refused`, or `.unsupported` if a server sends
// one anyway) answers at once with `not_allowed`, without involving the driver.

import SyncProtocol
import Values

/// What a peer does with the server's `query`.
public enum RemoteQuerySupport: Sendable, Equatable {
    /// Not announced in `hello.caps`; a `query` is still answered with `not_allowed`.
    case unsupported
    /// Announced, and answered with `not_allowed` ("remote queries are not allowed by this peer").
    case refused
    /// Announced and run on the local store.
    case allowed
}

/// A query the driver is running.
struct RunningQuery: Sendable {
    var receivedAt: UInt64
    var maxResultBytes: UInt64
}

extension SyncClientSession {
    /// Queries a peer runs at once; beyond, `busy` (a server keeps far fewer outstanding).
    static var maxRunningQueries: Int { 16 }

    mutating func received(_ query: RemoteQuery, now: UInt64) -> [Action] {
        func refuse(_ error: RemoteQueryError) -> [Action] {
            let result = RemoteQueryResult(id: query.id, outcome: .failure(error)).fitting(maxBytes: query.maxResultBytes)
            return [emit(.result(result))]
        }
        guard configuration.remoteQueries == .allowed else { return refuse(.notAllowedByPeer) }
        guard queriesRunning[query.id] == nil, queriesRunning.count < Self.maxRunningQueries else {
            return refuse(RemoteQueryError(.busy, "the peer is running \(queriesRunning.count) remote queries already"))
        }
        queriesRunning[query.id] = RunningQuery(receivedAt: now, maxResultBytes: query.maxResultBytes)
        return [.remoteQuery(query)]
    }

    /// The outcome of a `.remoteQuery`: sent as `result` if the session is still ready (a query of
    /// an earlier session is dropped with it).
    public mutating func answerQuery(id: UInt32, _ outcome: Result<[Value], RemoteQueryError>, warnings: [String] = [],
                                     now: UInt64) -> [Action] {
        guard state == .ready, let running = queriesRunning.removeValue(forKey: id) else { return [] }
        let result = RemoteQueryResult(id: id, outcome: outcome, warnings: warnings, elapsedMillis: now &- running.receivedAt)
        return [emit(.result(result.fitting(maxBytes: running.maxResultBytes)))]
    }
}
