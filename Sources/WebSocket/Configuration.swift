// Per-endpoint limits and timers of a WebSocket connection, and the values it hands out.
import Sockets

/// Limits and timers of one endpoint. Defaults suit the sync protocol's small messages; the
/// Autobahn echo endpoint raises them (section 9 sends 16 MiB messages in up to 65,536 frames).
public struct WebSocketConfiguration: Sendable, Hashable {
    /// Largest payload of one frame; checked from the header, before any payload is read (1009).
    /// Payloads stream through the parser unbuffered, so memory is bounded by `maxMessageSize`;
    /// this limit only refuses absurd headers early. It defaults to the message limit because
    /// peers (including our own writer) send a whole message as one frame.
    public var maxFrameSize: Int
    /// Largest message, after decompression (1009).
    public var maxMessageSize: Int
    /// Largest first message a peer sends (1009), when smaller than `maxMessageSize`: a protocol
    /// whose first message is small and says who the peer is (sync's `hello`) bounds what a peer
    /// that has not yet said who it is can make the server hold. Nil: `maxMessageSize`.
    public var maxFirstMessageSize: Int? = nil
    /// Shared with the endpoint's other connections: what all of them may be receiving at once,
    /// payload charged as it arrives and given back when its message is delivered or its
    /// connection closes (1013 past it). Nil: each connection bounded by `maxMessageSize` alone.
    public var messageBudget: ByteBudget? = nil
    /// Most frames one message may be split into (1009): bounds per-frame work for tiny frames.
    public var maxFragmentsPerMessage: Int
    /// Send a Ping after this long without receiving anything; nil disables keep-alive.
    public var pingInterval: Duration?
    /// Give up (1006) if nothing at all arrives this long after a keep-alive Ping.
    public var pingTimeout: Duration
    /// How long to wait for the peer's Close after ours, and (client) for the server to close TCP.
    public var closeTimeout: Duration
    /// Bytes queued for the socket at which the I/O layer should stop reading from the peer.
    public var highWaterMark: Int
    /// Bytes queued at which reading resumes.
    public var lowWaterMark: Int
    /// Queued bytes beyond which a send drops the peer instead of buffering more.
    public var maxQueuedBytes: Int
    /// A peer is dropped (1008) when its queue stays above the high-water mark this long, or when
    /// the socket takes none of the output queued for it this long (its TCP window stays shut).
    public var writeStallTimeout: Duration

    public init(
        maxFrameSize: Int = 4 << 20, maxMessageSize: Int = 4 << 20, maxFragmentsPerMessage: Int = 1024,
        pingInterval: Duration? = .seconds(30), pingTimeout: Duration = .seconds(20),
        closeTimeout: Duration = .seconds(5), highWaterMark: Int = 1 << 20, lowWaterMark: Int = 256 << 10,
        maxQueuedBytes: Int = 16 << 20, writeStallTimeout: Duration = .seconds(30)
    ) {
        self.maxFrameSize = max(125, maxFrameSize)
        self.maxMessageSize = max(0, maxMessageSize)
        self.maxFragmentsPerMessage = max(1, maxFragmentsPerMessage)
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.closeTimeout = closeTimeout
        self.highWaterMark = max(1, highWaterMark)
        self.lowWaterMark = min(max(0, lowWaterMark), self.highWaterMark)
        self.maxQueuedBytes = max(self.highWaterMark, maxQueuedBytes)
        self.writeStallTimeout = writeStallTimeout
    }

    /// Limits for a conformance/benchmark echo endpoint (Autobahn section 9 needs these).
    public static var echo: Self {
        Self(maxFrameSize: 20 << 20, maxMessageSize: 20 << 20, maxFragmentsPerMessage: 1 << 17,
             highWaterMark: 24 << 20, lowWaterMark: 4 << 20, maxQueuedBytes: 64 << 20)
    }
}

/// A complete message.
public enum WebSocketMessage: Hashable, Sendable {
    case text(String)
    case binary([UInt8])
}

/// What the I/O layer must do after a step of the connection, in order.
public enum WebSocketAction: Hashable, Sendable {
    /// A message for the application.
    case deliver(WebSocketMessage)
    /// Bytes for the socket, in order. Report progress with `didWrite(byteCount:now:)`.
    case write([UInt8])
    /// The WebSocket is closed; reported exactly once. `code` is the peer's Close code when the
    /// handshake completed (1005 if it sent none), the code we failed the connection with, or
    /// 1006 when the transport ended or a deadline passed without a handshake.
    case closed(code: WebSocketCloseCode, reason: String)
    /// Write what is already queued (best effort, without waiting for a slow peer), then close
    /// the socket. Reported at most once, always after the `.closed` it belongs to.
    case closeTransport
}

/// Why a send was refused.
public enum WebSocketSendError: Error, Hashable, Sendable {
    /// The close handshake has started or finished: no more data may be sent (§5.5.1).
    case notOpen
    /// A control frame payload over 125 bytes (§5.5).
    case controlPayloadTooLong
}
