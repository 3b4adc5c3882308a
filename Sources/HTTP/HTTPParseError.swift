/// Why a message was rejected. Each case maps to exactly one status code (`status`), in one place.
public enum HTTPParseError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Request line longer than `maxRequestLineLength` (RFC 9112 §3: 414).
    case requestLineTooLong
    /// Header section larger than `maxHeaderBytes` (RFC 6585 §5: 431).
    case headerSectionTooLarge
    /// More than `maxHeaderCount` fields (431).
    case tooManyHeaderFields
    /// Declared or received content larger than `maxBodyBytes` (RFC 9110 §15.5.14: 413).
    case contentTooLarge
    /// A transfer coding other than `chunked` (RFC 9112 §6.1: 501).
    case unsupportedTransferCoding
    /// An HTTP version other than 1.0/1.1 (505).
    case versionNotSupported
    /// An `Expect` other than `100-continue` (RFC 9110 §10.1.1: 417).
    case unsupportedExpectation
    /// Anything else that makes the message unreadable or ambiguous: 400 and close.
    case malformed(Malformation)

    public enum Malformation: String, Sendable {
        case bareCR = "bare CR"
        case bareLF = "line ends in LF without CR"
        case obsFold = "obsolete line folding"
        case invalidHeaderName = "invalid header field name"
        case whitespaceBeforeColon = "whitespace between field name and colon"
        case invalidHeaderValue = "invalid character in header field value"
        case invalidMethod = "invalid method"
        case invalidTarget = "invalid request target"
        case invalidVersion = "invalid HTTP version"
        case invalidStatusLine = "invalid status line"
        case invalidContentLength = "invalid Content-Length"
        case duplicateContentLength = "more than one Content-Length"
        case contentLengthWithTransferEncoding = "both Content-Length and Transfer-Encoding"
        case transferEncodingInHTTP10 = "Transfer-Encoding in an HTTP/1.0 message"
        case invalidTransferEncoding = "invalid Transfer-Encoding"
        case invalidChunk = "invalid chunk framing"
        case chunkLineTooLong = "chunk size line too long"
        case missingHost = "missing Host"
        case duplicateHost = "more than one Host"
        case truncated = "connection closed inside a message"
    }

    public var status: HTTPStatus {
        switch self {
        case .requestLineTooLong: .uriTooLong
        case .headerSectionTooLarge, .tooManyHeaderFields: .requestHeaderFieldsTooLarge
        case .contentTooLarge: .contentTooLarge
        case .unsupportedTransferCoding: .notImplemented
        case .versionNotSupported: .httpVersionNotSupported
        case .unsupportedExpectation: .expectationFailed
        case .malformed: .badRequest
        }
    }

    public var description: String {
        switch self {
        case .requestLineTooLong: "request line too long"
        case .headerSectionTooLarge: "header section too large"
        case .tooManyHeaderFields: "too many header fields"
        case .contentTooLarge: "content too large"
        case .unsupportedTransferCoding: "unsupported transfer coding"
        case .versionNotSupported: "HTTP version not supported"
        case .unsupportedExpectation: "unsupported expectation"
        case .malformed(let m): m.rawValue
        }
    }
}

/// Parser limits; all are enforced before the bytes they bound are buffered.
public struct HTTPParserLimits: Sendable {
    public var maxRequestLineLength = 8 * 1024
    public var maxHeaderBytes = 64 * 1024
    public var maxHeaderCount = 100
    public var maxBodyBytes = 1024 * 1024
    /// A chunk-size line, extensions included.
    public var maxChunkLineLength = 4 * 1024
    public init() {}
}
