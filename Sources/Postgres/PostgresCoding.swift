/// Values that can be sent as parameters.
public protocol PostgresEncodable: Sendable {
    static var postgresType: PostgresOID { get }
    var postgresBind: PostgresBind { get }
    /// The value's text form inside an array literal (before quoting).
    var postgresText: String { get }
    /// True when `appendPostgresBinary` writes the type's binary send format, so arrays of it
    /// go to the server in binary (no quoting or escaping, bytea not hex-doubled).
    static var hasPostgresBinary: Bool { get }
    /// Appends the value in PostgreSQL's binary format for its type (the type's `typsend`).
    /// Only called when `hasPostgresBinary` is true.
    func appendPostgresBinary(to buffer: inout [UInt8])
}

extension PostgresEncodable {
    public var postgresBind: PostgresBind { PostgresBind(type: Self.postgresType, text: postgresText) }
    public static var hasPostgresBinary: Bool { false }
    public func appendPostgresBinary(to buffer: inout [UInt8]) {}
}

extension FixedWidthInteger {
    /// Appends the integer in network byte order (PostgreSQL's binary integer format).
    @inline(__always)
    func appendBigEndian(to buffer: inout [UInt8]) {
        var v = self.bigEndian
        withUnsafeBytes(of: &v) { buffer.append(contentsOf: $0) }
    }
}

/// Values that can be read from a result column (results arrive in text format).
public protocol PostgresDecodable: Sendable {
    static func decode(postgresText: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Self
}

/// Why a column could not be decoded; the row turns it into `PostgresError.decoding` with the column name.
public struct PostgresDecodeFailure: Error, Sendable {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
}

extension String: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.text }
    public var postgresText: String { self }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { buffer.append(contentsOf: utf8) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> String {
        String(decoding: t, as: UTF8.self)
    }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.bool }
    public var postgresText: String { self ? "t" : "f" }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { buffer.append(self ? 1 : 0) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Bool {
        guard t.count == 1 else { throw PostgresDecodeFailure("not a boolean") }
        switch t[0] {
        case UInt8(ascii: "t"): return true
        case UInt8(ascii: "f"): return false
        default: throw PostgresDecodeFailure("not a boolean")
        }
    }
}

/// Shared integer text decoding: ASCII digits with an optional sign, checked for overflow.
func decodeInteger<T: FixedWidthInteger>(_ t: UnsafeRawBufferPointer, as: T.Type) throws(PostgresDecodeFailure) -> T {
    var i = 0
    var negative = false
    if t.count > 0 && (t[0] == UInt8(ascii: "-") || t[0] == UInt8(ascii: "+")) {
        negative = t[0] == UInt8(ascii: "-")
        i = 1
    }
    guard i < t.count else { throw PostgresDecodeFailure("not an integer") }
    var value: T = 0
    while i < t.count {
        let d = t[i] &- UInt8(ascii: "0")
        guard d < 10 else { throw PostgresDecodeFailure("not an integer") }
        let (m, o1) = value.multipliedReportingOverflow(by: 10)
        let (r, o2) = negative ? m.subtractingReportingOverflow(T(d)) : m.addingReportingOverflow(T(d))
        guard !o1 && !o2 else { throw PostgresDecodeFailure("integer out of range for \(T.self)") }
        value = r
        i += 1
    }
    return value
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.int8 }
    public var postgresText: String { String(self) }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { appendBigEndian(to: &buffer) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Int64 {
        try decodeInteger(t, as: Int64.self)
    }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.int8 }
    public var postgresText: String { String(self) }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { Int64(self).appendBigEndian(to: &buffer) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Int {
        try decodeInteger(t, as: Int.self)
    }
}

extension Int32: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.int4 }
    public var postgresText: String { String(self) }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { appendBigEndian(to: &buffer) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Int32 {
        try decodeInteger(t, as: Int32.self)
    }
}

extension Int16: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.int2 }
    public var postgresText: String { String(self) }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { appendBigEndian(to: &buffer) }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Int16 {
        try decodeInteger(t, as: Int16.self)
    }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.float8 }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { bitPattern.appendBigEndian(to: &buffer) }
    public var postgresText: String {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return description
    }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> Double {
        guard let d = Double(String(decoding: t, as: UTF8.self)) else { throw PostgresDecodeFailure("not a number") }
        return d
    }
}

/// bytea: sent in binary format, read from the server's hex text form (`\x0a1b…`).
/// A wrapper rather than `[UInt8]` so arrays of other types can still be parameters.
public struct PostgresBytea: Sendable, Hashable, PostgresEncodable, PostgresDecodable {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public static var postgresType: PostgresOID { PostgresType.bytea }
    public var postgresBind: PostgresBind { PostgresBind(type: PostgresType.bytea, binary: bytes) }
    public static var hasPostgresBinary: Bool { true }
    public func appendPostgresBinary(to buffer: inout [UInt8]) { buffer.append(contentsOf: bytes) }
    public var postgresText: String {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: 0, count: 2 + bytes.count * 2)
        out[0] = UInt8(ascii: "\\"); out[1] = UInt8(ascii: "x")
        for (i, b) in bytes.enumerated() {
            out[2 + 2 * i] = hex[Int(b >> 4)]
            out[3 + 2 * i] = hex[Int(b & 15)]
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> PostgresBytea {
        guard t.count >= 2, t[0] == UInt8(ascii: "\\"), t[1] == UInt8(ascii: "x"), t.count % 2 == 0 else {
            throw PostgresDecodeFailure("not a hex bytea (bytea_output must be hex)")
        }
        func nibble(_ c: UInt8) throws(PostgresDecodeFailure) -> UInt8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: throw PostgresDecodeFailure("bad hex digit in bytea")
            }
        }
        let n = (t.count - 2) / 2
        var out = [UInt8](repeating: 0, count: n)
        for i in 0..<n {
            out[i] = try nibble(t[2 + 2 * i]) << 4 | nibble(t[3 + 2 * i])
        }
        return PostgresBytea(out)
    }
}

extension PostgresJSON: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.jsonb }
    public var postgresText: String { text }
    public static var hasPostgresBinary: Bool { true }
    /// jsonb's binary format: a version byte (1) and the JSON text (`jsonb_send`).
    public func appendPostgresBinary(to buffer: inout [UInt8]) {
        buffer.append(1)
        buffer.append(contentsOf: text.utf8)
    }
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> PostgresJSON {
        PostgresJSON(String(decoding: t, as: UTF8.self))
    }
}
