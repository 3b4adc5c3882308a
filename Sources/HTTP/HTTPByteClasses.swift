/// Byte classes of RFC 9110 §5.6.2 (`tchar`) and §5.5 (field values), as lookup tables.
enum ByteClass {
    /// token = 1*tchar; tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
    /// "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA. A switch, not a table: no global to load.
    @inline(__always)
    static func isTchar(_ b: UInt8) -> Bool {
        switch b {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    /// field-vchar / SP / HTAB: VCHAR (0x21–0x7E), obs-text (0x80–0xFF), SP, HTAB. No CTL, no DEL.
    @inline(__always)
    static func isFieldValue(_ b: UInt8) -> Bool { b == 0x09 || (b >= 0x20 && b != 0x7F) }

    /// Request-target bytes: visible ASCII only (no SP, CTL, DEL or raw non-ASCII).
    static func isTargetByte(_ b: UInt8) -> Bool { b > 0x20 && b < 0x7F }

    static func hexValue(_ b: UInt8) -> UInt64? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt64(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt64(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt64(b - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    /// ASCII case-insensitive comparison of raw bytes with a lowercase literal.
    @inline(__always)
    static func equalsLowercase(_ bytes: UnsafeRawBufferPointer, _ lower: StaticString) -> Bool {
        guard bytes.count == lower.utf8CodeUnitCount else { return false }
        let l = lower.utf8Start
        for i in 0..<bytes.count {
            var b = bytes[i]
            if b >= 0x41 && b <= 0x5A { b |= 0x20 }
            if b != l[i] { return false }
        }
        return true
    }
}
