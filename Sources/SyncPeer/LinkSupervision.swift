// Keepalive and supervision for links whose loss is silence (BLE: a peer out of range sends no
// FIN and no RST; the channel just stops). Sans-I/O, on whatever clock the caller reads:
// `PacketSyncLink` uses the monotonic clock, tests a manual one.

import Sockets

public struct LinkSupervision: Sendable {
    public enum Action: Sendable, Equatable {
        case none
        /// Nothing was sent for `keepaliveInterval`: send a keepalive.
        case sendKeepalive
        /// Nothing was received for `timeout`: the link is lost.
        case lost
    }

    /// Send a keepalive after this long without sending anything.
    public let keepaliveInterval: Duration
    /// The link is lost after this long without receiving anything (a few keepalive intervals).
    public let timeout: Duration
    public private(set) var lastReceived: NanoTime
    public private(set) var lastSent: NanoTime

    public init(keepaliveInterval: Duration, timeout: Duration, now: NanoTime) {
        self.keepaliveInterval = keepaliveInterval
        self.timeout = timeout
        lastReceived = now
        lastSent = now
    }

    public mutating func received(at now: NanoTime) { lastReceived = max(lastReceived, now) }
    public mutating func sent(at now: NanoTime) { lastSent = max(lastSent, now) }

    /// What is due at `now` (loss first: a lost link sends nothing more).
    public func check(at now: NanoTime) -> Action {
        if now >= lastReceived.adding(timeout) { return .lost }
        if now >= lastSent.adding(keepaliveInterval) { return .sendKeepalive }
        return .none
    }

    /// When `check` next has something to do.
    public var nextDeadline: NanoTime { min(lastReceived.adding(timeout), lastSent.adding(keepaliveInterval)) }
}
