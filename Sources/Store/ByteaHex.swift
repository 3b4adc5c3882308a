// Decoding of `bytea` columns in PostgreSQL's hex output format (text-format results,
// `bytea_output = hex`, PostgreSQL docs §8.4.1):
//
//   \x 0a 1b ff ...        two ASCII hex digits per byte, after the two-byte prefix "\x"
//
// The sync paths read every document's state this way (initial sync moves ~100 MB of states for
// 100k small documents), so this decoder works on the row's raw buffer with a lookup table and
// writes straight into the result array: the generic `PostgresBytea` decoder (bounds-checked
// element stores, a throwing call per digit) was a fifth of the server's CPU in an initial sync.

import Postgres

enum ByteaHex {
    /// Digit value per ASCII byte; 0x10 marks a byte that is not a hex digit.
    static let digits: [UInt8] = (0..<256).map { (c: Int) -> UInt8 in
        switch c {
        case 0x30...0x39: UInt8(c - 0x30)
        case 0x61...0x66: UInt8(c - 0x61 + 10)
        case 0x41...0x46: UInt8(c - 0x41 + 10)
        default: 0x10
        }
    }

    /// Decodes `\x…` hex text; nil when it is not well-formed (odd length, no prefix, a non-digit).
    static func decode(_ text: UnsafeRawBufferPointer) -> [UInt8]? {
        guard text.count >= 2, text.count % 2 == 0, text[0] == UInt8(ascii: "\\"), text[1] == UInt8(ascii: "x"),
              let base = text.baseAddress else { return nil }
        let n = (text.count - 2) / 2
        let source = base.assumingMemoryBound(to: UInt8.self) + 2
        var invalid: UInt8 = 0
        let out = digits.withUnsafeBufferPointer { table in
            [UInt8](unsafeUninitializedCapacity: n) { buffer, count in
                for i in 0..<n {
                    let hi = table[Int(source[2 &* i])], lo = table[Int(source[2 &* i &+ 1])]
                    invalid |= hi | lo
                    buffer[i] = hi &<< 4 | lo & 0x0F
                }
                count = n
            }
        }
        return invalid & 0x10 == 0 ? out : nil
    }

    /// A non-NULL bytea column of a text-format result.
    static func decode(_ row: PostgresRow, column: Int) throws(StoreError) -> [UInt8] {
        let bytes = row.withRawValue(column) { raw in raw.flatMap(decode) }
        guard let bytes else { throw StoreError.corrupt("column \(column) is NULL or not a hex bytea") }
        return bytes
    }
}
