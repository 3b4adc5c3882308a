/// One D-Bus value with its type. Arrays carry their element type so that an empty array still
/// has a signature; a dictionary is an array of `dictEntry` values.
public indirect enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// An index into the message's file descriptors; BigPeer never passes descriptors.
    case unixFD(UInt32)
    case array(DBusType, [DBusValue])
    case dictEntry(DBusValue, DBusValue)
    case structure([DBusValue])
    case variant(DBusValue)

    public var type: DBusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .unixFD: .unixFD
        case .array(let element, _): .array(element)
        case .dictEntry(let k, let v): .dictEntry(k.type, v.type)
        case .structure(let fields): .structure(fields.map(\.type))
        case .variant: .variant
        }
    }

    /// `a{KV}` from pairs, in the given order.
    public static func dictionary(key: DBusType, value: DBusType, _ pairs: [(DBusValue, DBusValue)]) -> DBusValue {
        .array(.dictEntry(key, value), pairs.map { .dictEntry($0.0, $0.1) })
    }

    /// `a{sv}`, the usual property map, sorted by key so the bytes are deterministic.
    public static func properties(_ map: [String: DBusValue]) -> DBusValue {
        dictionary(key: .string, value: .variant, map.sorted { $0.key < $1.key }.map { (.string($0.key), .variant($0.value)) })
    }

    /// `ay` from bytes.
    public static func bytes(_ bytes: [UInt8]) -> DBusValue { .array(.byte, bytes.map { .byte($0) }) }

    // MARK: - Reading values back

    public var stringValue: String? {
        switch self {
        case .string(let s), .objectPath(let s), .signature(let s): s
        case .variant(let inner): inner.stringValue
        default: nil
        }
    }

    public var uint32Value: UInt32? {
        switch self {
        case .uint32(let v): v
        case .variant(let inner): inner.uint32Value
        default: nil
        }
    }

    public var boolValue: Bool? {
        switch self {
        case .boolean(let v): v
        case .variant(let inner): inner.boolValue
        default: nil
        }
    }

    /// The elements of an array (through variants).
    public var arrayElements: [DBusValue]? {
        switch self {
        case .array(_, let elements): elements
        case .variant(let inner): inner.arrayElements
        default: nil
        }
    }

    /// The bytes of an `ay` (through variants).
    public var byteArray: [UInt8]? {
        guard let elements = arrayElements else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(elements.count)
        for e in elements {
            guard case .byte(let b) = e else { return nil }
            out.append(b)
        }
        return out
    }

    /// The pairs of a dictionary (through variants); nil for anything else.
    public var dictionaryEntries: [(key: DBusValue, value: DBusValue)]? {
        guard let elements = arrayElements else { return nil }
        var out: [(key: DBusValue, value: DBusValue)] = []
        for e in elements {
            guard case .dictEntry(let k, let v) = e else { return nil }
            out.append((k, v))
        }
        return out
    }

    /// An `a{s*}` as a Swift dictionary with the values unwrapped from their variants (first key wins).
    public var stringKeyedDictionary: [String: DBusValue]? {
        guard let entries = dictionaryEntries else { return nil }
        var out: [String: DBusValue] = [:]
        for (k, v) in entries {
            guard let key = k.stringValue else { return nil }
            if out[key] == nil { out[key] = v.unwrappedVariant }
        }
        return out
    }

    /// The value inside any number of variants.
    public var unwrappedVariant: DBusValue {
        if case .variant(let inner) = self { return inner.unwrappedVariant }
        return self
    }
}

/// Object path validity (spec: "Valid Object Paths"): `/`, or `/` followed by non-empty elements
/// of `[A-Za-z0-9_]` separated by single slashes, no trailing slash.
public func isValidObjectPath(_ path: String) -> Bool {
    let bytes = Array(path.utf8)
    guard bytes.first == UInt8(ascii: "/") else { return false }
    if bytes.count == 1 { return true }
    guard bytes.last != UInt8(ascii: "/") else { return false }
    var previousSlash = false
    for b in bytes {
        if b == UInt8(ascii: "/") {
            if previousSlash { return false }
            previousSlash = true
            continue
        }
        previousSlash = false
        let ok = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == UInt8(ascii: "_")
        if !ok { return false }
    }
    return true
}
