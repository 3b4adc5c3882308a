/// Marshals values in little-endian byte order. Offsets, and so padding, count from the start of
/// the message: a writer for a body starts at an offset that is a multiple of 8, which gives the
/// same padding.
public struct DBusWriter: Sendable {
    /// Spec: an array's data is at most 2^26 bytes.
    public static let maxArrayBytes = 1 << 26
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func pad(to alignment: Int) {
        while bytes.count % alignment != 0 { bytes.append(0) }
    }

    mutating func appendInteger<T: FixedWidthInteger>(_ value: T) {
        pad(to: MemoryLayout<T>.size)
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    public mutating func write(_ value: DBusValue) throws(DBusError) {
        try write(value, depth: 0)
    }

    public mutating func write(_ values: [DBusValue]) throws(DBusError) {
        for v in values { try write(v, depth: 0) }
    }

    private mutating func write(_ value: DBusValue, depth: Int) throws(DBusError) {
        guard depth <= DBusReader.maxDepth else { throw .invalidValue("nested more than \(DBusReader.maxDepth) levels") }
        switch value {
        case .byte(let v): bytes.append(v)
        case .boolean(let v): appendInteger(UInt32(v ? 1 : 0))
        case .int16(let v): appendInteger(v)
        case .uint16(let v): appendInteger(v)
        case .int32(let v): appendInteger(v)
        case .uint32(let v), .unixFD(let v): appendInteger(v)
        case .int64(let v): appendInteger(v)
        case .uint64(let v): appendInteger(v)
        case .double(let v): appendInteger(v.bitPattern)
        case .string(let s):
            try writeString(s)
        case .objectPath(let s):
            guard isValidObjectPath(s) else { throw .invalidValue("invalid object path \"\(s)\"") }
            try writeString(s)
        case .signature(let s):
            _ = try DBusSignature.parse(s)
            writeSignature(s)
        case .array(let elementType, let elements):
            if case .dictEntry(let key, _) = elementType, !key.isBasic { throw .invalidValue("dict entry key of type \(key.signature)") }
            appendInteger(UInt32(0))
            let lengthAt = bytes.count - 4
            pad(to: elementType.alignment)
            let start = bytes.count
            for e in elements {
                guard e.type == elementType else { throw .invalidValue("array of \(elementType.signature) holds a \(e.type.signature)") }
                try write(e, depth: depth + 1)
            }
            let length = bytes.count - start
            guard length <= Self.maxArrayBytes else { throw .invalidValue("array of \(length) bytes is over 2^26") }
            withUnsafeBytes(of: UInt32(length).littleEndian) { raw in
                for i in 0..<4 { bytes[lengthAt + i] = raw[i] }
            }
        case .dictEntry(let k, let v):
            pad(to: 8)
            try write(k, depth: depth + 1)
            try write(v, depth: depth + 1)
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidValue("empty struct") }
            pad(to: 8)
            for f in fields { try write(f, depth: depth + 1) }
        case .variant(let inner):
            let sig = inner.type.signature
            guard sig.utf8.count <= DBusSignature.maxLength else { throw .invalidValue("variant signature over 255 bytes") }
            writeSignature(sig)
            try write(inner, depth: depth + 1)
        }
    }

    private mutating func writeString(_ s: String) throws(DBusError) {
        let utf8 = Array(s.utf8)
        guard !utf8.contains(0) else { throw .invalidValue("string with a NUL byte") }
        appendInteger(UInt32(utf8.count))
        bytes.append(contentsOf: utf8)
        bytes.append(0)
    }

    private mutating func writeSignature(_ s: String) {
        bytes.append(UInt8(s.utf8.count))
        bytes.append(contentsOf: s.utf8)
        bytes.append(0)
    }
}
