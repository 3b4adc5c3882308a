/// Unmarshals values from hostile bytes in either byte order. Every length is checked against
/// the bytes that are there before anything is allocated, padding must be zero, booleans 0 or 1,
/// strings valid UTF-8 without NUL, and values nest at most `maxDepth` containers deep (arrays,
/// structs, dict entries and variants together).
public struct DBusReader: Sendable {
    /// Spec: 32 nested arrays plus 32 nested structs; variants count toward the same total here.
    public static let maxDepth = 64

    let bytes: [UInt8]
    /// The bytes past `end` are not this reader's (the body ends where the message says).
    let end: Int
    public let bigEndian: Bool
    public private(set) var offset: Int

    public init(bytes: [UInt8], offset: Int = 0, end: Int? = nil, bigEndian: Bool) {
        self.bytes = bytes
        self.offset = offset
        self.end = min(end ?? bytes.count, bytes.count)
        self.bigEndian = bigEndian
    }

    public var isAtEnd: Bool { offset >= end }

    mutating func skipPadding(to alignment: Int) throws(DBusError) {
        let padded = (offset + alignment - 1) / alignment * alignment
        guard padded <= end else { throw .truncated(offset: offset) }
        for i in offset..<padded where bytes[i] != 0 { throw .invalid(offset: i, "non-zero padding") }
        offset = padded
    }

    mutating func readInteger<T: FixedWidthInteger>(_: T.Type) throws(DBusError) -> T {
        let size = MemoryLayout<T>.size
        try skipPadding(to: size)
        guard offset + size <= end else { throw .truncated(offset: offset) }
        var raw: T = 0
        for i in 0..<size { raw |= T(truncatingIfNeeded: bytes[offset + i]) << (8 * i) }
        offset += size
        return bigEndian ? raw.byteSwapped : raw
    }

    public mutating func read(_ type: DBusType) throws(DBusError) -> DBusValue {
        try read(type, depth: 0)
    }

    /// Values of every type of `signature`, in order.
    public mutating func read(signature types: [DBusType]) throws(DBusError) -> [DBusValue] {
        var out: [DBusValue] = []
        for t in types { out.append(try read(t, depth: 0)) }
        return out
    }

    private mutating func read(_ type: DBusType, depth: Int) throws(DBusError) -> DBusValue {
        guard depth <= Self.maxDepth else { throw .tooDeep(offset: offset) }
        switch type {
        case .byte:
            guard offset < end else { throw .truncated(offset: offset) }
            offset += 1
            return .byte(bytes[offset - 1])
        case .boolean:
            let at = offset
            let raw = try readInteger(UInt32.self)
            guard raw <= 1 else { throw .invalid(offset: at, "boolean \(raw)") }
            return .boolean(raw == 1)
        case .int16: return .int16(try readInteger(Int16.self))
        case .uint16: return .uint16(try readInteger(UInt16.self))
        case .int32: return .int32(try readInteger(Int32.self))
        case .uint32: return .uint32(try readInteger(UInt32.self))
        case .unixFD: return .unixFD(try readInteger(UInt32.self))
        case .int64: return .int64(try readInteger(Int64.self))
        case .uint64: return .uint64(try readInteger(UInt64.self))
        case .double: return .double(Double(bitPattern: try readInteger(UInt64.self)))
        case .string: return .string(try readString())
        case .objectPath:
            let at = offset
            let s = try readString()
            guard isValidObjectPath(s) else { throw .invalid(offset: at, "invalid object path") }
            return .objectPath(s)
        case .signature:
            let s = try readSignatureText()
            _ = try DBusSignature.parse(s)
            return .signature(s)
        case .variant:
            let at = offset
            let s = try readSignatureText()
            let inner: DBusType
            do { inner = try DBusSignature.parseSingle(s) } catch { throw .invalid(offset: at, "\(error)") }
            return .variant(try read(inner, depth: depth + 1))
        case .array(let element):
            let at = offset
            let length = Int(try readInteger(UInt32.self))
            guard length <= DBusWriter.maxArrayBytes else { throw .invalid(offset: at, "array of \(length) bytes is over 2^26") }
            try skipPadding(to: element.alignment)
            let stop = offset + length
            guard stop <= end else { throw .truncated(offset: offset) }
            var elements: [DBusValue] = []
            // Every element takes at least one byte, so this loop ends within `length` steps.
            while offset < stop {
                elements.append(try read(element, depth: depth + 1))
                guard offset <= stop else { throw .invalid(offset: at, "array elements overrun its length") }
            }
            return .array(element, elements)
        case .dictEntry(let k, let v):
            try skipPadding(to: 8)
            let key = try read(k, depth: depth + 1)
            return .dictEntry(key, try read(v, depth: depth + 1))
        case .structure(let fields):
            try skipPadding(to: 8)
            var values: [DBusValue] = []
            for f in fields { values.append(try read(f, depth: depth + 1)) }
            return .structure(values)
        }
    }

    private mutating func readString() throws(DBusError) -> String {
        let length = Int(try readInteger(UInt32.self))
        guard length < end - offset else { throw .truncated(offset: offset) }
        return try stringBytes(count: length)
    }

    private mutating func readSignatureText() throws(DBusError) -> String {
        guard offset < end else { throw .truncated(offset: offset) }
        let length = Int(bytes[offset])
        offset += 1
        guard length < end - offset else { throw .truncated(offset: offset) }
        return try stringBytes(count: length)
    }

    /// `count` bytes of UTF-8 followed by a NUL, none inside.
    private mutating func stringBytes(count: Int) throws(DBusError) -> String {
        let slice = bytes[offset..<(offset + count)]
        guard bytes[offset + count] == 0 else { throw .invalid(offset: offset + count, "string not NUL-terminated") }
        guard !slice.contains(0) else { throw .invalid(offset: offset, "NUL inside a string") }
        guard let s = String(validating: slice, as: UTF8.self) else { throw .invalid(offset: offset, "string is not UTF-8") }
        offset += count + 1
        return s
    }
}
