// The framing of `COPY … FROM STDIN (FORMAT binary)` payloads (PostgreSQL docs, "COPY", "Binary
// Format"; integers in network byte order, as in every binary value this module sends):
//
//   header   "PGCOPY\n\xFF\r\n\0"  flags int32 = 0  extension length int32 = 0
//   tuple    field count int16, then per field: length int32 (-1 = NULL) | the type's send format
//   trailer  int16 = -1
//
// Callers write the fields' contents; this writes the lengths, so no caller hand-rolls byte order.

/// Appends binary COPY framing to a byte buffer.
public enum PostgresBinaryCopy {
    public static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]
    public static let trailer: [UInt8] = [0xFF, 0xFF]

    /// Starts a tuple of `fields` fields.
    public static func appendTuple(fields: Int16, to out: inout [UInt8]) { fields.appendBigEndian(to: &out) }

    /// A NULL field.
    public static func appendNull(to out: inout [UInt8]) { Int32(-1).appendBigEndian(to: &out) }

    /// A field holding these bytes (text and bytea: the bytes themselves).
    public static func appendField<C: Collection>(_ bytes: C, to out: inout [UInt8]) where C.Element == UInt8 {
        Int32(truncatingIfNeeded: bytes.count).appendBigEndian(to: &out)
        out.append(contentsOf: bytes)
    }

    /// An int4 field.
    public static func appendInt32Field(_ v: Int32, to out: inout [UInt8]) {
        Int32(4).appendBigEndian(to: &out)
        v.appendBigEndian(to: &out)
    }

    /// An int8 field; returns where its value starts, for `patchInt64`.
    @discardableResult
    public static func appendInt64Field(_ v: Int64, to out: inout [UInt8]) -> Int {
        Int32(8).appendBigEndian(to: &out)
        let at = out.count
        v.appendBigEndian(to: &out)
        return at
    }

    /// Overwrites an int8 value written by `appendInt64Field` at `offset`.
    public static func patchInt64(_ v: Int64, at offset: Int, in out: inout [UInt8]) {
        withUnsafeBytes(of: v.bigEndian) { b in
            for i in 0..<8 { out[offset + i] = b[i] }
        }
    }

    /// A field whose contents `body` appends; its length is patched in afterwards, so the contents
    /// (JSON text, say) are written once, in place.
    public static func appendField(to out: inout [UInt8], _ body: (inout [UInt8]) -> Void) {
        let lengthAt = out.count
        out.append(contentsOf: [0, 0, 0, 0])
        body(&out)
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: out.count - lengthAt - 4).bigEndian) { b in
            for i in 0..<4 { out[lengthAt + i] = b[i] }
        }
    }
}
