// The link abstraction every sync transport implements: WebSocket (`WebSocketMessageLink`), LAN
// TCP (`StreamLinkConnection`) and BLE L2CAP or its AF_UNIX stand-in (`PacketSyncLink`), each on
// the dialling and the accepting side. A link moves whole messages in order; what the messages
// mean (the sync session) sits above it. `MessageLinkAcceptanceTests` runs one suite against all.
//
//   send(message, completion) ─▶ [queue] ─▶ kernel ─▶ completion(.success), in send order
//   queuedBytes, requestDrainNotification ─▶ callbacks.drained        (backpressure, outgoing)
//   socket ─▶ framing ─▶ callbacks.received while credit > 0          (credit, incoming: at 0 the
//                        └─ else held, and the socket is not read      peer's sends stall in TCP
//                                                                      or L2CAP flow control)
//
// Loop-confined: a link is created, called and calls back on its `loop` only.

import Sockets
import SyncProtocol

public protocol MessageLink: AnyObject {
    var loop: EventLoop { get }
    /// What the link reports to its owner; settable before the first message arrives.
    var callbacks: LinkCallbacks { get set }
    /// Largest message sent or accepted: a larger send throws `.tooLarge`; a larger incoming
    /// message closes the link with the protocol's too-big code (4009, or 1009 on WebSocket).
    var maxMessageSize: Int { get }
    /// Connected and not closing: sends are taken.
    var isOpen: Bool { get }
    /// Bytes queued and not yet handed to the kernel.
    var queuedBytes: Int { get }
    var counters: LinkCounters { get }
    /// Messages the consumer will still take (`Int.max`: no limit).
    var receiveCredit: Int { get }

    /// Queues `message`. `completion` runs once its last byte is handed to the kernel (or to TLS),
    /// in send order and possibly before `send` returns, or with `.closed` when the link closes
    /// first. Throws, without calling `completion`, when the message is too large or the link is
    /// not open. A nil completion costs nothing per message.
    func send(_ message: [UInt8], completion: SendCompletion?) throws(MessageLinkError)
    /// Runs `body`, which may send many messages, and writes once afterwards where the transport
    /// can (TCP and WebSocket: a burst of small messages leaves in one syscall).
    func batchingSends(_ body: () -> Void)
    /// True when the queue is above the transport's low-water mark: `callbacks.drained` follows
    /// once it is not. False when it already is (nothing follows; go on at once).
    func requestDrainNotification() -> Bool
    /// The consumer takes `messages` more (saturating at `Int.max`, no limit): held messages are
    /// delivered, and the socket is read again once none is held.
    func grantCredit(_ messages: Int)
    /// Closes on purpose, telling the peer `code` and `reason` (a WebSocket close frame; `bye` on
    /// TCP and BLE) once queued messages are written. A second call does nothing more.
    func close(code: UInt16, reason: String)
    /// Closes now, dropping queued messages and telling the peer nothing (as a vanished peer).
    func abort()
}

extension MessageLink {
    /// Sends without a completion; a message the link cannot take is dropped.
    public func send(_ message: [UInt8]) { try? send(message, completion: nil) }
}

public typealias SendCompletion = (Result<Void, MessageLinkError>) -> Void

/// Why a send was not taken, or did not complete.
public enum MessageLinkError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLarge(size: Int, limit: Int)
    case notOpen
    /// The link closed before the message was handed to the kernel.
    case closed(LinkClose)

    public var description: String {
        switch self {
        case .tooLarge(let size, let limit): "message of \(size) bytes above the link's limit of \(limit)"
        case .notOpen: "the link is not open"
        case .closed(let close): "the link closed first: \(close)"
        }
    }
}

/// How a link ended, reported once (`LinkCallbacks.closed`).
public struct LinkClose: Sendable, Equatable, CustomStringConvertible {
    public enum Origin: Sendable, Equatable {
        /// This side closed (`close`, `abort`, a violation it found, supervision).
        case local
        /// The peer closed, said so, or vanished.
        case peer
    }

    public var origin: Origin
    /// The close code: ours, or the one the peer said (its `bye` or close frame); nil when the
    /// link ended without one (the peer vanished, an error, a connect that failed).
    public var code: UInt16?
    public var reason: String
    /// Whether the link had opened.
    public var wasOpen: Bool
    /// What the owner logs and passes on (`SyncLink`'s down reason).
    public var description: String

    public init(origin: Origin, code: UInt16?, reason: String, wasOpen: Bool, description: String) {
        self.origin = origin
        self.code = code
        self.reason = reason
        self.wasOpen = wasOpen
        self.description = description
    }
}

/// Per-link counters. Bytes are message bytes (what `send` took and `received` gave), not the
/// framing; keepalives are the transport's own (BLE keepalive SDUs; none on TCP and WebSocket).
public struct LinkCounters: Sendable, Equatable {
    public var messagesSent = 0, messagesReceived = 0
    public var bytesSent: UInt64 = 0, bytesReceived: UInt64 = 0
    public var keepalivesSent = 0, keepalivesReceived = 0
    /// Bytes queued and not yet handed to the kernel, when the counters were read.
    public var queuedBytes = 0

    public init() {}
}
