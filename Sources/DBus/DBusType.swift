// The D-Bus type system (https://dbus.freedesktop.org/doc/dbus-specification.html, "Type System")
// and the validity rules of signatures.

/// One complete D-Bus type.
public indirect enum DBusType: Hashable, Sendable {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature, unixFD, variant
    case array(DBusType)
    /// Only valid as the element of an array (`a{kv}`); the key is a basic type.
    case dictEntry(DBusType, DBusType)
    case structure([DBusType])

    /// Alignment in bytes of a value of this type on the wire (spec: "Marshaling").
    public var alignment: Int {
        switch self {
        case .byte, .signature, .variant: 1
        case .int16, .uint16: 2
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array: 4
        case .int64, .uint64, .double, .dictEntry, .structure: 8
        }
    }

    public var isBasic: Bool {
        switch self {
        case .array, .dictEntry, .structure, .variant: false
        default: true
        }
    }

    /// The type's signature text, such as `a{sv}`.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .variant: "v"
        case .array(let element): "a" + element.signature
        case .dictEntry(let key, let value): "{" + key.signature + value.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    /// The signature of a sequence of types (a message body, a struct's fields).
    public static func signature(of types: [DBusType]) -> String { types.map(\.signature).joined() }
}

/// Parsing and validating signatures: at most 255 bytes, at most 32 nested arrays and 32 nested
/// structs (dict entries count as structs), dict entries only as array elements with a basic key,
/// no empty structs.
public enum DBusSignature {
    public static let maxLength = 255
    public static let maxArrayDepth = 32
    public static let maxStructDepth = 32

    /// The complete types of `text`, in order.
    public static func parse(_ text: String) throws(DBusError) -> [DBusType] {
        let bytes = Array(text.utf8)
        guard bytes.count <= maxLength else { throw .invalidSignature(text, "longer than \(maxLength) bytes") }
        var parser = Parser(bytes: bytes, text: text)
        var types: [DBusType] = []
        while parser.offset < bytes.count { types.append(try parser.completeType(arrays: 0, structs: 0)) }
        return types
    }

    /// Exactly one complete type (a variant's signature).
    public static func parseSingle(_ text: String) throws(DBusError) -> DBusType {
        let types = try parse(text)
        guard types.count == 1 else { throw .invalidSignature(text, "a variant holds exactly one complete type") }
        return types[0]
    }

    private struct Parser {
        let bytes: [UInt8]
        let text: String
        var offset = 0

        mutating func completeType(arrays: Int, structs: Int) throws(DBusError) -> DBusType {
            guard offset < bytes.count else { throw .invalidSignature(text, "ends inside a type") }
            let c = bytes[offset]
            offset += 1
            switch c {
            case UInt8(ascii: "y"): return .byte
            case UInt8(ascii: "b"): return .boolean
            case UInt8(ascii: "n"): return .int16
            case UInt8(ascii: "q"): return .uint16
            case UInt8(ascii: "i"): return .int32
            case UInt8(ascii: "u"): return .uint32
            case UInt8(ascii: "x"): return .int64
            case UInt8(ascii: "t"): return .uint64
            case UInt8(ascii: "d"): return .double
            case UInt8(ascii: "s"): return .string
            case UInt8(ascii: "o"): return .objectPath
            case UInt8(ascii: "g"): return .signature
            case UInt8(ascii: "h"): return .unixFD
            case UInt8(ascii: "v"): return .variant
            case UInt8(ascii: "a"):
                guard arrays < maxArrayDepth else { throw .invalidSignature(text, "more than \(maxArrayDepth) nested arrays") }
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "{") {
                    offset += 1
                    guard structs < maxStructDepth else { throw .invalidSignature(text, "more than \(maxStructDepth) nested structs") }
                    let key = try completeType(arrays: arrays + 1, structs: structs + 1)
                    guard key.isBasic else { throw .invalidSignature(text, "a dict entry's key must be a basic type") }
                    let value = try completeType(arrays: arrays + 1, structs: structs + 1)
                    guard offset < bytes.count, bytes[offset] == UInt8(ascii: "}") else { throw .invalidSignature(text, "a dict entry has exactly two types") }
                    offset += 1
                    return .array(.dictEntry(key, value))
                }
                return .array(try completeType(arrays: arrays + 1, structs: structs))
            case UInt8(ascii: "("):
                guard structs < maxStructDepth else { throw .invalidSignature(text, "more than \(maxStructDepth) nested structs") }
                var fields: [DBusType] = []
                while true {
                    guard offset < bytes.count else { throw .invalidSignature(text, "unclosed struct") }
                    if bytes[offset] == UInt8(ascii: ")") { offset += 1; break }
                    fields.append(try completeType(arrays: arrays, structs: structs + 1))
                }
                guard !fields.isEmpty else { throw .invalidSignature(text, "empty struct") }
                return .structure(fields)
            default:
                throw .invalidSignature(text, "unexpected character at \(offset - 1)")
            }
        }
    }
}
