// Close status codes (RFC 6455 §7.4) and the protocol errors that map onto them.
//
// Every way a peer can break the protocol is one case of `WebSocketProtocolError`; the single
// `closeCode` switch below is the only place that decides which code goes on the wire (STYLE.md
// practice 7: closed error enums mapped to wire codes in one place).

/// A close status code (RFC 6455 §7.4.1, IANA "WebSocket Close Code Number Registry").
public struct WebSocketCloseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(_ rawValue: UInt16) { self.rawValue = rawValue }

    public static let normalClosure = Self(1000)
    public static let goingAway = Self(1001)
    public static let protocolError = Self(1002)
    public static let unsupportedData = Self(1003)
    /// Never sent: reports a Close frame that carried no code (§7.4.1).
    public static let noStatusReceived = Self(1005)
    /// Never sent: reports a connection that ended without a Close frame (§7.4.1).
    public static let abnormalClosure = Self(1006)
    public static let invalidPayloadData = Self(1007)
    public static let policyViolation = Self(1008)
    public static let messageTooBig = Self(1009)
    public static let mandatoryExtension = Self(1010)
    public static let internalError = Self(1011)
    public static let serviceRestart = Self(1012)
    public static let tryAgainLater = Self(1013)
    public static let badGateway = Self(1014)

    /// Whether a peer may put this code in a Close frame (RFC 6455 §7.4.1, §7.4.2):
    /// 1000–1003 and 1007–1011 are defined by the RFC, 1012–1014 were registered with IANA
    /// afterwards, 3000–3999 belong to libraries and frameworks, 4000–4999 to applications.
    /// 1004 is reserved, 1005/1006/1015 must never appear on the wire, and everything else
    /// below 3000 is unassigned, so receiving it is a protocol error (1002).
    public var isValidOnWire: Bool {
        switch rawValue {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }

    public var description: String { String(rawValue) }
}

/// A violation of RFC 6455 / RFC 7692 by the peer, or a configured limit it exceeded.
/// The connection answers each with a Close frame carrying `closeCode` and then closes.
public enum WebSocketProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// RSV1–3 set without a negotiated extension that defines them (§5.2), or RSV1 on a
    /// control frame or a continuation frame (RFC 7692 §6.1).
    case reservedBitsSet(UInt8)
    /// Opcodes 0x3–0x7 and 0xB–0xF are reserved (§5.2).
    case reservedOpcode(UInt8)
    /// A control frame with FIN clear (§5.5: control frames MUST NOT be fragmented).
    case fragmentedControlFrame
    /// A control frame whose payload is longer than 125 bytes (§5.5).
    case controlFrameTooLong(UInt64)
    /// A client frame without a mask (§5.1: the server MUST close the connection).
    case unmaskedFrameFromClient
    /// A server frame with a mask (§5.1: the client MUST close the connection).
    case maskedFrameFromServer
    /// A 64-bit payload length with its most significant bit set (§5.2).
    case payloadLengthOverflow
    /// A continuation frame with no message in progress (§5.4).
    case unexpectedContinuation
    /// A new text or binary frame while a fragmented message is still open (§5.4).
    case expectedContinuation
    /// Text (or a Close reason) that is not valid UTF-8 (§8.1).
    case invalidUTF8
    /// A Close payload of exactly one byte (§5.5.1: a body, when present, starts with a 2-byte code).
    case closePayloadTooShort
    /// A Close code that may not be sent (§7.4.1, §7.4.2).
    case invalidCloseCode(UInt16)
    /// The compressed payload of a message did not inflate (RFC 7692 §7.2.2).
    case invalidCompressedData
    /// A frame longer than the endpoint's frame limit (§10.4).
    case frameTooLarge(length: UInt64, limit: Int)
    /// A message (after decompression) longer than the endpoint's message limit (§10.4).
    case messageTooLarge(limit: Int)
    /// A message split into more frames than the endpoint allows (§10.4).
    case tooManyFragments(limit: Int)
    /// The endpoint's connections are receiving as much as it may hold (`WebSocketConfiguration.messageBudget`).
    case overloaded

    /// The code this endpoint sends when it fails the connection for this reason (§7.4.1).
    public var closeCode: WebSocketCloseCode {
        switch self {
        case .reservedBitsSet, .reservedOpcode, .fragmentedControlFrame, .controlFrameTooLong,
             .unmaskedFrameFromClient, .maskedFrameFromServer, .payloadLengthOverflow,
             .unexpectedContinuation, .expectedContinuation, .closePayloadTooShort, .invalidCloseCode:
            .protocolError
        case .invalidUTF8, .invalidCompressedData:
            .invalidPayloadData
        case .frameTooLarge, .messageTooLarge, .tooManyFragments:
            .messageTooBig
        case .overloaded:
            .tryAgainLater
        }
    }

    /// A short reason for the Close frame: fixed ASCII, never peer-supplied text.
    public var description: String {
        switch self {
        case .reservedBitsSet: "reserved bits set"
        case .reservedOpcode: "reserved opcode"
        case .fragmentedControlFrame: "fragmented control frame"
        case .controlFrameTooLong: "control frame too long"
        case .unmaskedFrameFromClient: "client frame not masked"
        case .maskedFrameFromServer: "server frame masked"
        case .payloadLengthOverflow: "payload length overflow"
        case .unexpectedContinuation: "unexpected continuation frame"
        case .expectedContinuation: "expected continuation frame"
        case .invalidUTF8: "invalid UTF-8"
        case .closePayloadTooShort: "close payload too short"
        case .invalidCloseCode: "invalid close code"
        case .invalidCompressedData: "invalid compressed data"
        case .frameTooLarge: "frame too large"
        case .messageTooLarge: "message too large"
        case .tooManyFragments: "too many fragments"
        case .overloaded: "too many messages being received; try again later"
        }
    }
}
