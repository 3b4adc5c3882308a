// A subscription as the peer side keeps it (PROTOCOL.md §4.3).

import Values

/// A sync subscription: a `SELECT * FROM collection [WHERE ...]` with arguments (PROTOCOL.md §4.3).
/// Its key (query text + arguments) names its checkpoint in the store, so a peer that subscribes
/// to the same query after a restart resumes where it was.
public struct SyncSubscription: Sendable, Equatable, Hashable {
    public var query: String
    public var arguments: [String: Value]
    public var collection: String
    public var key: String { query + "\u{0}" + JSON.string(.object(arguments)) }

    public init(query: String, arguments: [String: Value], collection: String) {
        self.query = query
        self.arguments = arguments
        self.collection = collection
    }
}
