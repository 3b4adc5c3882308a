// Which subscriptions a local node holds upstream: its configured ones (`--upstream-subscribe`),
// and with `--upstream-relay-subscriptions` the union of its local peers' subscriptions, each
// kept for `relayLinger` after the last local peer with it goes, so a peer that reconnects does
// not make the node unsubscribe and sync again.

import DQL
import SyncPeer
import Values

/// Errors of the replicator that are not the store's or the link's.
public enum UpstreamError: Error, Sendable, CustomStringConvertible {
    case invalidSubscription(String, String)

    public var description: String {
        switch self {
        case .invalidSubscription(let q, let why): "--upstream-subscribe \(q): \(why)"
        }
    }
}

enum UpstreamSubscriptions {
    /// A configured subscription: a `SELECT * FROM collection [WHERE ...]` without arguments.
    static func parse(_ query: String) throws(UpstreamError) -> SyncSubscription {
        let statement: Statement
        do { statement = try DQL.parse(query) } catch { throw .invalidSubscription(query, "\(error)") }
        guard case .select(let s) = statement, s.projections == [.all], s.groupBy.isEmpty, s.having == nil,
              s.orderBy.isEmpty, s.limit == nil, s.offset == nil, !s.distinct else {
            throw .invalidSubscription(query, "a sync subscription is SELECT * FROM collection [WHERE ...] (no DISTINCT, GROUP BY, ORDER BY, LIMIT, OFFSET)")
        }
        return SyncSubscription(query: query, arguments: [:], collection: s.from.name)
    }
}

/// The relayed subscriptions with their linger: pure, driven by the core's clock.
struct RelayedSubscriptions {
    /// Subscriptions local peers hold now.
    private(set) var current: Set<SyncSubscription> = []
    /// Subscriptions no local peer holds any more, and when they stop being relayed (ms).
    private(set) var lingering: [SyncSubscription: UInt64] = [:]

    /// The local peers' union changed.
    mutating func update(_ now: Set<SyncSubscription>, at millis: UInt64, linger: UInt64) {
        for gone in current.subtracting(now) { lingering[gone] = millis + linger }
        for back in now { lingering[back] = nil }
        current = now
    }

    /// Drops lingering subscriptions whose time is up; returns whether any went.
    mutating func expire(at millis: UInt64) -> Bool {
        let before = lingering.count
        lingering = lingering.filter { $0.value > millis }
        return lingering.count != before
    }

    /// What to relay upstream now.
    var relayed: Set<SyncSubscription> { current.union(lingering.keys) }
}
