/// What can go wrong reading or writing D-Bus messages and the authentication handshake. Offsets
/// are from the start of the message.
public enum DBusError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidSignature(String, String)
    case truncated(offset: Int)
    case invalid(offset: Int, String)
    case tooLarge(Int, limit: Int)
    case tooDeep(offset: Int)
    case invalidValue(String)
    case authentication(String)

    public var description: String {
        switch self {
        case .invalidSignature(let s, let why): "invalid D-Bus signature \"\(s)\": \(why)"
        case .truncated(let offset): "D-Bus message truncated at byte \(offset)"
        case .invalid(let offset, let why): "invalid D-Bus message at byte \(offset): \(why)"
        case .tooLarge(let size, let limit): "D-Bus message of \(size) bytes is over the limit of \(limit)"
        case .tooDeep(let offset): "D-Bus value nested more than 64 levels at byte \(offset)"
        case .invalidValue(let why): "cannot marshal D-Bus value: \(why)"
        case .authentication(let why): "D-Bus authentication failed: \(why)"
        }
    }
}
