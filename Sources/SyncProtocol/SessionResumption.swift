// One side's bookkeeping for a session that may move to another link (PROTOCOL.md §4.16),
// sans-I/O, the same on server and peer:
//
//   sent:      numbered messages written so far; the ones the other side has not confirmed with
//              `rack` stay in `unconfirmed`, to be written again on the next link
//   received:  numbered messages taken so far; said back in `rack` every `rackEvery` messages or
//              `rackBytes` bytes (and in `hello.resume.rx` / `welcome.rx` on a resume)
//
// A resume replays exactly the messages after the other side's count, so nothing is applied twice
// and nothing confirmed is sent twice. The unconfirmed bytes count as queued for flow control: a
// session whose link is gone stops producing once they reach its queue limit.

/// The resumption state of one session (PROTOCOL.md §4.16).
public struct SessionResumption: Sendable {
    public static let tokenSize = 16
    /// A `rack` goes out after this many numbered messages or bytes received without one.
    public static let rackEvery = 16
    public static let rackBytes = 32 << 10

    public let token: [UInt8]
    public private(set) var sent: UInt64 = 0
    public private(set) var received: UInt64 = 0
    /// Messages `confirmed ..< sent`, oldest first.
    private var unconfirmed: [[UInt8]] = []
    private var head = 0
    public private(set) var confirmed: UInt64 = 0
    public private(set) var unconfirmedBytes = 0
    private var messagesSinceRack = 0
    private var bytesSinceRack = 0

    public init(token: [UInt8]) { self.token = token }

    /// A fresh random token.
    public static func newToken() -> [UInt8] {
        var g = SystemRandomNumberGenerator()
        return (0..<tokenSize).map { _ in UInt8.random(in: 0...255, using: &g) }
    }

    /// A numbered message written (or to be written once a link is back).
    public mutating func recordSent(_ bytes: [UInt8]) {
        unconfirmed.append(bytes)
        unconfirmedBytes += bytes.count
        sent += 1
    }

    public enum ConfirmError: Error, Equatable, Sendable {
        /// A count above what was sent, or below one already confirmed.
        case outOfRange(count: UInt64, confirmed: UInt64, sent: UInt64)
    }

    /// The other side has received the first `count` numbered messages (`rack`, or the count in a
    /// resume): they are dropped from the replay buffer.
    public mutating func confirm(_ count: UInt64) throws(ConfirmError) {
        guard count >= confirmed, count <= sent else { throw .outOfRange(count: count, confirmed: confirmed, sent: sent) }
        while confirmed < count {
            unconfirmedBytes -= unconfirmed[head].count
            unconfirmed[head] = []
            head += 1
            confirmed += 1
        }
        // Compact once the dead prefix dominates, so the buffer stays proportional to what waits.
        if head > 64 && head * 2 > unconfirmed.count {
            unconfirmed.removeFirst(head)
            head = 0
        }
    }

    /// What to write again on a new link after the other side said it has `count` messages.
    public mutating func replay(after count: UInt64) throws(ConfirmError) -> ArraySlice<[UInt8]> {
        try confirm(count)
        return unconfirmed[head...]
    }

    /// A numbered message taken; true when a `rack` is due.
    public mutating func noteReceived(size: Int) -> Bool {
        received += 1
        messagesSinceRack += 1
        bytesSinceRack += size
        return messagesSinceRack >= Self.rackEvery || bytesSinceRack >= Self.rackBytes
    }

    /// Whether messages were taken since the last `rack` (one goes out when the link idles).
    public var rackPending: Bool { messagesSinceRack > 0 }

    /// The `rack` to send now.
    public mutating func takeRack() -> SyncMessage {
        messagesSinceRack = 0
        bytesSinceRack = 0
        return .received(received)
    }
}
