// Finding the bytes a JSON string must escape (RFC 8259 §7: `"`, `\` and U+0000–U+001F), eight
// at a time. Document values are mostly long runs of plain text; checking a 64-bit word per step
// instead of a byte cuts the serializer's time on them several-fold.
//
// The word tests are the classic exact "has a zero byte" / "has a byte below n" bit tricks
// (each is true iff some byte qualifies, no false positives), so a word that passes has nothing
// to escape and a word that fails is scanned byte by byte.

extension JSONWriter {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highs: UInt64 = 0x8080_8080_8080_8080

    /// Whether any byte of `w` is `"`, `\` or below 0x20.
    @inline(__always) static func wordNeedsEscape(_ w: UInt64) -> Bool {
        let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5C)
        let control = (w &- ones &* 0x20) & ~w
        let zeroQuote = (quote &- ones) & ~quote
        let zeroBackslash = (backslash &- ones) & ~backslash
        return (control | zeroQuote | zeroBackslash) & highs != 0
    }

    @inline(__always) static func needsEscape(_ b: UInt8) -> Bool { b < 0x20 || b == 0x22 || b == 0x5C }

    /// The index of the first byte at or after `start` that must be escaped, or `bytes.count`.
    @inline(__always) static func firstEscape(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        guard let base = bytes.baseAddress else { return bytes.count }
        var i = start
        while i + 8 <= bytes.count {
            if wordNeedsEscape(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { break }
            i += 8
        }
        while i < bytes.count {
            if needsEscape(base[i]) { return i }
            i += 1
        }
        return i
    }

    /// The length of the escaped form of `bytes` (without the quotes), as `writeEscaped` writes it.
    static func escapedCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var total = bytes.count
        var i = firstEscape(in: bytes, from: 0)
        while i < bytes.count {
            switch bytes[i] {
            case 0x22, 0x5C, 0x0A, 0x0D, 0x09, 0x08, 0x0C: total += 1  // `\x`
            default: total += 5  // `\u00XX`
            }
            i = firstEscape(in: bytes, from: i + 1)
        }
        return total
    }
}

extension JSON {
    /// The number of bytes `serialize(value)` produces, computed without producing them (for size
    /// limits: no buffer, no key sorting).
    public static func serializedCount(_ value: Value) -> Int {
        switch value {
        case .null: return 4
        case .bool(let b): return b ? 4 : 5
        case .int(let i): return intDigits(i)
        case .double(let d): return JSONWriter.doubleText(d).utf8.count
        case .string(let s): return stringCount(s)
        case .array(let a):
            var n = 2 + max(a.count - 1, 0)
            for element in a { n += serializedCount(element) }
            return n
        case .object(let o):
            var n = 2 + max(o.count - 1, 0)
            for (key, v) in o { n += stringCount(key) + 1 + serializedCount(v) }
            return n
        }
    }

    static func stringCount(_ s: String) -> Int {
        if let n = s.utf8.withContiguousStorageIfAvailable({ JSONWriter.escapedCount($0) }) { return n + 2 }
        var copy = s
        return copy.withUTF8 { JSONWriter.escapedCount($0) } + 2
    }

    static func intDigits(_ i: Int64) -> Int {
        var m = i.magnitude, n = i < 0 ? 2 : 1
        while m >= 10 { m /= 10; n += 1 }
        return n
    }
}
