/// Byte classes of RFC 9110 §5.6.2 (`tchar`) and §5.5 (field values), as lookup tables.
enum ByteClass {
    /// token = 1*tchar; tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
    /// "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
    static let tchar: [Bool] = {
        var t = [Bool](repeating: false, count: 256)
        for c in UInt8(ascii: "0")...UInt8(ascii: "9") { t[Int(c)] = true }
        for c in UInt8(ascii: "a")...UInt8(ascii: "z") { t[Int(c)] = true }
        for c in UInt8(ascii: "A")...UInt8(ascii: "Z") { t[Int(c)] = true }
        for c in "!#$%&'*+-.^_`|~".utf8 { t[Int(c)] = true }
        return t
    }()

    /// field-vchar / SP / HTAB: VCHAR (0x21–0x7E), obs-text (0x80–0xFF), SP, HTAB. No CTL, no DEL.
    static let fieldValue: [Bool] = {
        var t = [Bool](repeating: false, count: 256)
        for c in 0x21...0x7E { t[c] = true }
        for c in 0x80...0xFF { t[c] = true }
        t[0x20] = true
        t[0x09] = true
        return t
    }()

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
