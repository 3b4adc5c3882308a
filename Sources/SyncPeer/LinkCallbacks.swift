// What a transport of `SyncLink` tells it, and the down message both byte-stream and packet
// transports give (`StreamLinkConnection`, `PacketSyncLink`).

/// What a link transport tells its owner (on the loop).
public struct LinkCallbacks {
    public var connected: () -> Void
    public var received: ([UInt8]) -> Void
    /// The send queue drained after a drain notification was asked for.
    public var drained: () -> Void
    /// Once: the transport is gone; `wasOpen`: it had connected.
    public var closed: (_ reason: String, _ wasOpen: Bool) -> Void

    public init(connected: @escaping () -> Void, received: @escaping ([UInt8]) -> Void, drained: @escaping () -> Void = {},
                closed: @escaping (_ reason: String, _ wasOpen: Bool) -> Void) {
        self.connected = connected
        self.received = received
        self.drained = drained
        self.closed = closed
    }

    /// The reason a closed transport reports: this side's close (`closedWith`, said in `bye`), the
    /// error that ended it, or the peer's close.
    static func reason(closedWith: (code: UInt16, reason: String)?, error: (any Error)?, wasOpen: Bool) -> String {
        if let (code, why) = closedWith { return "closed (\(code)\(why.isEmpty ? "" : ": " + why))" }
        if let error { return wasOpen ? "connection lost: \(error)" : "\(error)" }
        return "closed by the peer"
    }
}
