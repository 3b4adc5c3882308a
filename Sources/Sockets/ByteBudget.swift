import Synchronization

/// Bytes that many connections, on every loop, may hold in memory at once: what the HTTP server's
/// requests read whole have received (`HTTPServerConfiguration.maxBufferedRequestBytes`), what an
/// endpoint's WebSockets are receiving (`WebSocketConfiguration.messageBudget`). Each connection
/// takes bytes as they arrive and gives back what it took; past `limit` a take fails and the
/// caller refuses the request or the message. One relaxed atomic add per take: connections on
/// different loops never wait for each other. Equal only to itself.
public final class ByteBudget: Sendable, Hashable {
    public let limit: Int
    private let held = Atomic<Int>(0)
    private let refusals = Atomic<Int>(0)

    public init(limit: Int) { self.limit = max(1, limit) }

    /// Bytes held now.
    public var heldBytes: Int { held.load(ordering: .relaxed) }
    /// Takes refused since the start.
    public var refusedTakes: Int { refusals.load(ordering: .relaxed) }

    /// Takes `bytes`; false (nothing taken, the refusal counted) past `limit`.
    public func take(_ bytes: Int) -> Bool {
        if held.add(bytes, ordering: .relaxed).newValue <= limit { return true }
        held.subtract(bytes, ordering: .relaxed)
        refusals.add(1, ordering: .relaxed)
        return false
    }

    /// Gives back bytes taken earlier.
    public func give(_ bytes: Int) { held.subtract(bytes, ordering: .relaxed) }

    public static func == (a: ByteBudget, b: ByteBudget) -> Bool { a === b }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
