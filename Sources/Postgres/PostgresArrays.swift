/// One-dimensional arrays in PostgreSQL's text form: `{1,2,NULL,"a \"b\""}`.
/// Elements are quoted always on the way out (so no element text can break the literal),
/// and parsed back with the server's quoting rules. Multi-dimensional arrays are refused.
public struct PostgresArray<Element: Sendable>: Sendable {
    public var elements: [Element?]
    public init(_ elements: [Element?]) { self.elements = elements }
}

extension PostgresArray: PostgresEncodable where Element: PostgresEncodable {
    public static var postgresType: PostgresOID { PostgresType.arrayType(of: Element.postgresType) }

    /// Binary format when the element type has one (`array_send`), else the quoted text literal.
    ///
    ///     int32 ndim = 1 │ int32 has-nulls │ uint32 element OID │ int32 count │ int32 lower bound = 1
    ///     then per element: int32 length (-1 for NULL) │ that many bytes (the element's binary form)
    ///
    /// All integers big-endian. Binary avoids quoting and escaping every element, and sends
    /// bytea elements as raw bytes rather than hex text.
    public var postgresBind: PostgresBind {
        // Unknown element types map to text[] (`arrayType(of:)`): their OID would not match.
        let knownArrayType = Self.postgresType != PostgresType.textArray || Element.postgresType == PostgresType.text
        guard Element.hasPostgresBinary, knownArrayType else {
            return PostgresBind(type: Self.postgresType, text: postgresText)
        }
        var out: [UInt8] = []
        out.reserveCapacity(20 + elements.count * 16)
        if elements.isEmpty {  // zero dimensions: the empty array
            Int32(0).appendBigEndian(to: &out)
            Int32(0).appendBigEndian(to: &out)
            Element.postgresType.appendBigEndian(to: &out)
            return PostgresBind(type: Self.postgresType, binary: out)
        }
        Int32(1).appendBigEndian(to: &out)
        Int32(elements.contains { $0 == nil } ? 1 : 0).appendBigEndian(to: &out)
        Element.postgresType.appendBigEndian(to: &out)
        Int32(elements.count).appendBigEndian(to: &out)
        Int32(1).appendBigEndian(to: &out)
        for e in elements {
            guard let e else {
                Int32(-1).appendBigEndian(to: &out)
                continue
            }
            let lengthAt = out.count
            out.append(contentsOf: [0, 0, 0, 0])
            e.appendPostgresBinary(to: &out)
            let length = UInt32(truncatingIfNeeded: out.count - lengthAt - 4).bigEndian
            withUnsafeBytes(of: length) { b in
                for i in 0..<4 { out[lengthAt + i] = b[i] }
            }
        }
        return PostgresBind(type: Self.postgresType, binary: out)
    }

    public var postgresText: String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        for (i, e) in elements.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let e else { out.append(contentsOf: "NULL".utf8); continue }
            out.append(UInt8(ascii: "\""))
            for b in e.postgresText.utf8 {
                if b == UInt8(ascii: "\\") || b == UInt8(ascii: "\"") { out.append(UInt8(ascii: "\\")) }
                out.append(b)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}

extension PostgresArray: PostgresDecodable where Element: PostgresDecodable {
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> PostgresArray {
        let items = try parseArrayLiteral(t)
        var out: [Element?] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard let item else { out.append(nil); continue }
            let decoded = item.withUnsafeBytes { b in
                Result { () throws(PostgresDecodeFailure) -> Element in
                    try Element.decode(postgresText: b, type: PostgresType.unknown)
                }
            }
            out.append(try decoded.get())
        }
        return PostgresArray(out)
    }
}

extension Array: PostgresDecodable where Element: PostgresDecodable {
    /// Decodes an array with no NULL elements (use `PostgresArray` when NULLs are possible).
    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> [Element] {
        var out: [Element] = []
        for e in try PostgresArray<Element>.decode(postgresText: t, type: type).elements {
            guard let e else { throw PostgresDecodeFailure("array has a NULL element") }
            out.append(e)
        }
        return out
    }
}

extension Array: PostgresEncodable where Element: PostgresEncodable {
    public static var postgresType: PostgresOID { PostgresType.arrayType(of: Element.postgresType) }
    public var postgresBind: PostgresBind { PostgresArray<Element>(self.map { $0 }).postgresBind }
    public var postgresText: String { PostgresArray<Element>(self.map { $0 }).postgresText }
}

/// Splits a one-dimensional array literal into element texts (nil for NULL).
func parseArrayLiteral(_ t: UnsafeRawBufferPointer) throws(PostgresDecodeFailure) -> [[UInt8]?] {
    guard t.count >= 2, t[0] == UInt8(ascii: "{"), t[t.count - 1] == UInt8(ascii: "}") else {
        throw PostgresDecodeFailure("not an array literal (or not one-dimensional with lower bound 1)")
    }
    var items: [[UInt8]?] = []
    var i = 1
    let end = t.count - 1
    if i == end { return [] }
    while i <= end {
        if t[i] == UInt8(ascii: "{") { throw PostgresDecodeFailure("multi-dimensional arrays are not supported") }
        var item: [UInt8] = []
        var quoted = false
        if t[i] == UInt8(ascii: "\"") {
            quoted = true
            i += 1
            while i < end && t[i] != UInt8(ascii: "\"") {
                if t[i] == UInt8(ascii: "\\") { i += 1; guard i < end else { break } }
                item.append(t[i])
                i += 1
            }
            guard i < end else { throw PostgresDecodeFailure("unterminated quoted array element") }
            i += 1  // closing quote
        } else {
            while i < end && t[i] != UInt8(ascii: ",") {
                item.append(t[i])
                i += 1
            }
        }
        let isNull = !quoted && item.count == 4 && String(decoding: item, as: UTF8.self).uppercased() == "NULL"
        items.append(isNull ? nil : item)
        if i < end && t[i] != UInt8(ascii: ",") { throw PostgresDecodeFailure("malformed array literal") }
        i += 1
    }
    return items
}
