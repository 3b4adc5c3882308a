// Remote queries through a session's driver (PROTOCOL.md §4.15): `remoteQuery` hands the session a
// `query` and suspends until the session answers it. The session answers every query exactly once
// (SyncSession+RemoteQuery.swift), on its own clock: the deadline is checked by the driver's
// heartbeat timer, which wakes at least once a second, so an answer for a peer that stays silent
// comes at most about a second after the timeout.

import Synchronization
import SyncProtocol
import Values

/// Continuations of `remoteQuery` callers by query id.
struct RemoteQueryWaiters: Sendable {
    var lastID: UInt32 = 0
    var waiting: [UInt32: CheckedContinuation<RemoteQueryResult, Never>] = [:]
}

extension SyncConnection {
    /// Runs `statement` (a DQL SELECT) on the peer's local store: the peer's items, or an error when
    /// the peer refuses or cannot answer, does not answer within `timeoutMillis`, or the session
    /// ends first. At most `SyncSession.Configuration.maxOutstandingQueries` run at once per
    /// session (beyond: `busy`).
    public func remoteQuery(_ statement: String, arguments: [String: Value] = [:], timeoutMillis: UInt64,
                            maxResultBytes: UInt64) async -> RemoteQueryResult {
        await withCheckedContinuation { continuation in
            let id = queryWaiters.withLock { w in
                repeat { w.lastID &+= 1 } while w.waiting[w.lastID] != nil
                w.waiting[w.lastID] = continuation
                return w.lastID
            }
            deliver(.sendQuery(RemoteQuery(id: id, statement: statement, arguments: arguments,
                                           timeoutMillis: timeoutMillis, maxResultBytes: maxResultBytes)))
        }
    }

    /// The session's answer for a query: resumes its caller (with no lock held).
    func answerQuery(_ result: RemoteQueryResult) {
        queryWaiters.withLock { $0.waiting.removeValue(forKey: result.id) }?.resume(returning: result)
    }
}
