import Values

/// Why a received message was rejected. Every case closes the session with `closeCode`
/// (PROTOCOL.md §7); `description` is safe to send as the close reason.
public enum SyncProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Not decodable as one canonical CBOR data item.
    case malformed(CBORError)
    /// The item is not a map with text keys and a text `"t"`.
    case notAMessage(String)
    case unknownType(String)
    case missingField(type: String, field: String)
    case wrongType(type: String, field: String, expected: String)
    case outOfRange(type: String, field: String, reason: String)
    /// Larger than the receiver's maximum message size.
    case tooLarge(size: Int, limit: Int)
    /// Well-formed, but not allowed now (wrong state, wrong direction, credit exhausted).
    case unexpected(String)

    public var closeCode: SyncCloseCode {
        if case .tooLarge = self { return .messageTooLarge }
        return .protocolViolation
    }

    public var description: String {
        switch self {
        case .malformed(let e): "malformed message: \(e)"
        case .notAMessage(let why): "not a protocol message: \(why)"
        case .unknownType(let t): "unknown message type \"\(t.prefix(40))\""
        case .missingField(let t, let f): "\(t): missing field \"\(f)\""
        case .wrongType(let t, let f, let e): "\(t): field \"\(f)\" must be \(e)"
        case .outOfRange(let t, let f, let r): "\(t): field \"\(f)\": \(r)"
        case .tooLarge(let s, let l): "message of \(s) bytes exceeds the limit of \(l)"
        case .unexpected(let why): why
        }
    }
}
