/// Base64 (RFC 4648 §4, with padding: WebSocket keys) and base64url (§5, without padding: JWTs,
/// RFC 7515 §2). Decoding is strict — no whitespace, padding exactly as the variant requires, zero
/// unused bits in the last character — so every byte string has exactly one accepted text, which
/// is what security checks over these encodings need.
public enum Base64 {
    public enum Variant: Sendable {
        /// `+` `/` and `=` padding to a multiple of 4.
        case standard
        /// `-` `_` and no padding.
        case url

        var alphabet: [UInt8] { self == .standard ? Base64.standardAlphabet : Base64.urlAlphabet }
        var padded: Bool { self == .standard }
    }

    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: [UInt8], _ variant: Variant = .standard) -> String {
        let alphabet = variant.alphabet
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            for shift in [18, 12, 6, 0] { out.append(alphabet[Int((n >> UInt32(shift)) & 63)]) }
            i += 3
        }
        let rest = bytes.count - i
        if rest > 0 {
            let n = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
            out.append(alphabet[Int((n >> 18) & 63)])
            out.append(alphabet[Int((n >> 12) & 63)])
            if rest == 2 { out.append(alphabet[Int((n >> 6) & 63)]) }
            if variant.padded { out.append(contentsOf: Array(repeating: UInt8(ascii: "="), count: 3 - rest)) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Nil for characters outside the variant's alphabet, wrong padding, an impossible length, or
    /// non-zero unused bits.
    public static func decode(_ text: some Collection<UInt8>, _ variant: Variant = .standard) -> [UInt8]? {
        var chars = Array(text)
        if variant.padded {
            guard chars.count % 4 == 0 else { return nil }
            var pad = 0
            while pad < 2, chars.last == UInt8(ascii: "=") { chars.removeLast(); pad += 1 }
            // "=" anywhere else, or padding that does not match the length, is refused below.
            guard (chars.count + pad) % 4 == 0, pad == 0 || chars.count % 4 == 4 - pad else { return nil }
        }
        guard chars.count % 4 != 1 else { return nil }
        let alphabetIsURL = variant == .url
        var out: [UInt8] = []
        out.reserveCapacity(chars.count * 3 / 4)
        var acc: UInt32 = 0, bits = 0
        for c in chars {
            let v: UInt32
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = UInt32(c - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = UInt32(c - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = UInt32(c - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "-") where alphabetIsURL, UInt8(ascii: "+") where !alphabetIsURL: v = 62
            case UInt8(ascii: "_") where alphabetIsURL, UInt8(ascii: "/") where !alphabetIsURL: v = 63
            default: return nil
            }
            acc = (acc << 6 | v) & 0xFFFF
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8((acc >> UInt32(bits)) & 0xFF))
            }
        }
        guard acc & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}
