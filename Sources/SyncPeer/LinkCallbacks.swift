// What a `MessageLink` tells its owner, and the down message the TCP and BLE transports give
// (`StreamLinkConnection`, `PacketSyncLink`).

import SyncProtocol

/// What a link reports to its owner (on the loop).
public struct LinkCallbacks {
    /// A dialled link opened (an accepted one is open when it is made and does not report this).
    public var connected: () -> Void
    /// One message, while the consumer has credit.
    public var received: ([UInt8]) -> Void
    /// The send queue drained after a drain notification was asked for.
    public var drained: () -> Void
    /// Once: the link is gone.
    public var closed: (LinkClose) -> Void

    public init(connected: @escaping () -> Void = {}, received: @escaping ([UInt8]) -> Void, drained: @escaping () -> Void = {},
                closed: @escaping (LinkClose) -> Void) {
        self.connected = connected
        self.received = received
        self.drained = drained
        self.closed = closed
    }

    /// Reports nothing: a link's callbacks until its owner sets them.
    public static var none: LinkCallbacks { LinkCallbacks(received: { _ in }, closed: { _ in }) }

    /// How a link without a close frame ended: this side's close (`closedWith`, said in `bye`),
    /// the error that ended it, the peer's `bye`, or the peer's plain close.
    static func close(closedWith: (code: UInt16, reason: String)?, error: (any Error)?, peerBye: (code: UInt16, reason: String)?,
                      wasOpen: Bool) -> LinkClose {
        if let (code, why) = closedWith {
            return LinkClose(origin: .local, code: code, reason: why, wasOpen: wasOpen, description: "closed (\(code)\(why.isEmpty ? "" : ": " + why))")
        }
        if let error {
            return LinkClose(origin: .peer, code: nil, reason: "\(error)", wasOpen: wasOpen,
                             description: wasOpen ? "connection lost: \(error)" : "\(error)")
        }
        if let (code, why) = peerBye {
            return LinkClose(origin: .peer, code: code, reason: why, wasOpen: wasOpen,
                             description: "closed by the peer (\(code)\(why.isEmpty ? "" : ": " + why))")
        }
        return LinkClose(origin: .peer, code: nil, reason: "", wasOpen: wasOpen, description: "closed by the peer")
    }

    /// The code and reason of `message` when it is a `bye` (PROTOCOL.md §4.12): how the TCP and
    /// BLE links learn the peer's close reason. A canonical `bye` starts with its map header and
    /// `"t": "bye"`, so other messages cost a 7-byte comparison.
    static func bye(in message: [UInt8]) -> (code: UInt16, reason: String)? {
        guard message.count > byePrefix.count, message.starts(with: byePrefix),
              case .bye(let code, let reason)? = try? SyncMessageDecoder.decode(message) else { return nil }
        return (code, reason)
    }

    private static let byePrefix: [UInt8] = [0xa3, 0x61, 0x74, 0x63, 0x62, 0x79, 0x65]
}
