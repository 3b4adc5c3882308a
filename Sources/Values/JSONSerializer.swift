// Value -> JSON text (RFC 8259), deterministic: the same Value always yields the same bytes.
//
// - Object members are sorted by the UTF-8 bytes of their keys (code point order), so output is
//   canonical and can be hashed or compared byte for byte.
// - Integers print exactly; doubles print as the shortest decimal that reads back to the same Double
//   (the standard library's `description`, e.g. `0.1`, `1e+300`, `5e-324`, `2.0`), so a double stays
//   a double across a round trip; whole doubles between 2^53 and 2^63 print in full with `.0`
//   (`10000000000000000.0`, not `1e+16`), so they stay doubles through PostgreSQL's jsonb too.
//   JSON has no NaN or infinity (§6): they print as `null`.
// - Strings escape `"`, `\` and control characters (§7); `\b \f \n \r \t` use their short forms,
//   other controls `\u00XX`. Everything else, including non-ASCII, is written as raw UTF-8.
// - No insignificant whitespace.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension JSON {
    /// Serializes `value` to UTF-8 JSON bytes.
    public static func serialize(_ value: Value) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        JSONWriter.write(value, into: &out)
        return out
    }

    /// Serializes `value` to a JSON string.
    public static func string(_ value: Value) -> String {
        String(decoding: serialize(value), as: UTF8.self)
    }
}

extension Value {
    /// The canonical JSON text of this value (sorted keys, shortest doubles).
    public var jsonText: String { JSON.string(self) }
}

public enum JSONWriter {
    public static func write(_ value: Value, into out: inout [UInt8]) {
        switch value {
        case .null: appendASCII("null", to: &out)
        case .bool(let b): appendASCII(b ? "true" : "false", to: &out)
        case .int(let i): writeInt(i, into: &out)
        case .double(let d): writeDouble(d, into: &out)
        case .string(let s): writeString(s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            var first = true
            for element in a {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            var first = true
            for key in sortedKeys(o) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                // The key came from the dictionary itself, so the lookup always succeeds.
                if let v = o[key] { write(v, into: &out) }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Keys in code point order (byte order of their UTF-8), independent of String's own ordering.
    public static func sortedKeys(_ o: [String: Value]) -> [String] {
        o.keys.sorted(by: utf8Precedes)
    }

    /// Code point order: byte order of the UTF-8 (memcmp on native strings).
    @inline(__always) public static func utf8Precedes(_ a: String, _ b: String) -> Bool {
        if let r = a.utf8.withContiguousStorageIfAvailable({ pa in
            b.utf8.withContiguousStorageIfAvailable { pb -> Bool in
                let n = min(pa.count, pb.count)
                if n > 0, let x = pa.baseAddress, let y = pb.baseAddress {
                    let c = memcmp(x, y, n)
                    if c != 0 { return c < 0 }
                }
                return pa.count < pb.count
            }
        }), let result = r {
            return result
        }
        return a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    public static func writeDouble(_ d: Double, into out: inout [UInt8]) {
        appendASCII(doubleText(d), to: &out)
    }

    /// A double's JSON text (`writeDouble`, `serializedCount`).
    static func doubleText(_ d: Double) -> String {
        guard d.isFinite else { return "null" }
        // Past 2^53 `description` writes an exponent (`1e+16`). PostgreSQL's jsonb keeps a number's
        // value but not its form and gives `10000000000000000` back, an integer to every parser:
        // the double came back as an Int64, in values and in `_id`s alike. Such a double is a
        // whole number, and below 2^63 its digits fit an Int64: written with `.0` it reads back
        // as the same double and jsonb keeps the `.0`.
        if d.magnitude > 9_007_199_254_740_992, d.magnitude < 9_223_372_036_854_775_808 {
            return String(Int64(d)) + ".0"
        }
        return d.description
    }

    @inline(__always) static func appendASCII(_ s: String, to out: inout [UInt8]) {
        out.append(contentsOf: s.utf8)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Native strings expose their UTF-8 directly; others (bridged) are copied once.
        let done: Bool? = s.utf8.withContiguousStorageIfAvailable { bytes in
            writeEscaped(bytes, into: &out)
            return true
        }
        if done == nil {
            var copy = s
            copy.withUTF8 { writeEscaped($0, into: &out) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Copies runs of plain bytes in one go and escapes `"`, `\` and controls (RFC 8259 §7).
    static func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        var runStart = 0
        var i = firstEscape(in: bytes, from: 0)
        while i < bytes.count {
            let b = bytes[i]
            if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
            runStart = i + 1
            defer { i = firstEscape(in: bytes, from: i + 1) }
            out.append(0x5C)
            switch b {
            case 0x22: out.append(0x22)
            case 0x5C: out.append(0x5C)
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            case 0x08: out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "f"))
            default:
                out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 0xF)])
            }
        }
        if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
    }

    /// Decimal digits of an integer, written straight into the buffer.
    static func writeInt(_ i: Int64, into out: inout [UInt8]) {
        if i < 0 { out.append(UInt8(ascii: "-")) }
        var m = i.magnitude
        if m == 0 { out.append(UInt8(ascii: "0")); return }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var n = 0
        withUnsafeMutableBytes(of: &digits) { d in
            while m > 0 {
                d[19 - n] = UInt8(ascii: "0") + UInt8(m % 10)
                m /= 10
                n += 1
            }
            out.append(contentsOf: d[(20 - n)...])
        }
    }
}
