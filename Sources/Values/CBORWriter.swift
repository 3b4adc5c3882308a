// Canonical CBOR writer: RFC 8949 §4.2.1 "Core Deterministic Encoding Requirements".
//
// Every data item starts with one initial byte: 3 bits of major type, 5 bits of additional info.
//
//   +-----+-------+----------------------------------------------+
//   | MT  |  AI   | argument                                     |
//   +-----+-------+----------------------------------------------+
//   | 3b  | 0..23 | the argument itself (no following bytes)     |
//   |     |  24   | 1 following byte  (argument 24...255)        |
//   |     |  25   | 2 following bytes, big-endian (256...65535)  |
//   |     |  26   | 4 following bytes                            |
//   |     |  27   | 8 following bytes                            |
//   +-----+-------+----------------------------------------------+
//   MT 0 unsigned int, 1 negative int (-1 - arg), 2 byte string, 3 text string,
//   4 array, 5 map, 6 tag, 7 simple/float (20 false, 21 true, 22 null, 25/26/27 half/single/double).
//
// Deterministic rules applied here (§4.2.1, §4.2.2):
//   * arguments use the shortest form; indefinite lengths are written only by
//     `indefiniteArrayStart`/`breakStop`, for results streamed before their length is known;
//   * floating-point values use the shortest of half/single/double that keeps the exact value,
//     and every NaN is written as the half-precision quiet NaN 0xf97e00;
//   * map keys are sorted by the bytewise order of their encodings (the caller of the low-level
//     `mapHeader` is responsible for that; `Value` encoding and `sortedTextKeys` do it).

/// Appends canonical CBOR data items to a byte buffer. A value type: build, then take `bytes`.
public struct CBORWriter: Sendable {
    public private(set) var bytes: [UInt8]

    public init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// Writes an initial byte with `major` type and the shortest encoding of `argument`.
    public mutating func head(_ major: CBORMajorType, _ argument: UInt64) {
        let mt = major.rawValue << 5
        switch argument {
        case 0..<24:
            bytes.append(mt | UInt8(argument))
        case 24...0xFF:
            bytes.append(mt | 24)
            bytes.append(UInt8(argument))
        case 0x100...0xFFFF:
            bytes.append(mt | 25)
            appendBigEndian(argument, count: 2)
        case 0x1_0000...0xFFFF_FFFF:
            bytes.append(mt | 26)
            appendBigEndian(argument, count: 4)
        default:
            bytes.append(mt | 27)
            appendBigEndian(argument, count: 8)
        }
    }

    private mutating func appendBigEndian(_ v: UInt64, count: Int) {
        var shift = (count - 1) * 8
        while shift >= 0 {
            bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(shift)))
            shift -= 8
        }
    }

    public mutating func unsigned(_ v: UInt64) { head(.unsigned, v) }

    /// Major type 0 for v >= 0, major type 1 (encoding -1 - v) otherwise (§3.1).
    public mutating func int(_ v: Int64) {
        if v >= 0 {
            head(.unsigned, UInt64(v))
        } else {
            head(.negative, UInt64(bitPattern: -1 &- v))
        }
    }

    public mutating func text(_ s: String) {
        var s = s
        s.withUTF8 { utf8 in
            head(.text, UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    public mutating func byteString(_ b: [UInt8]) {
        head(.bytes, UInt64(b.count))
        bytes.append(contentsOf: b)
    }

    public mutating func arrayHeader(_ count: Int) { head(.array, UInt64(count)) }
    public mutating func mapHeader(_ count: Int) { head(.map, UInt64(count)) }

    public mutating func bool(_ b: Bool) { bytes.append(b ? 0xF5 : 0xF4) }
    public mutating func null() { bytes.append(0xF6) }

    /// Preferred (shortest exact) serialization of a float, §4.2.2; NaN is always 0xf97e00.
    public mutating func double(_ d: Double) {
        if d.isNaN {
            bytes.append(contentsOf: [0xF9, 0x7E, 0x00])
            return
        }
        if let half = CBORFloat.halfBits(exactly: d) {
            bytes.append(0xF9)
            appendBigEndian(UInt64(half), count: 2)
        } else if let single = Float(exactly: d) {
            bytes.append(0xFA)
            appendBigEndian(UInt64(single.bitPattern), count: 4)
        } else {
            bytes.append(0xFB)
            appendBigEndian(d.bitPattern, count: 8)
        }
    }

    /// Appends bytes that already are one or more complete canonical data items.
    public mutating func raw(_ encoded: [UInt8]) { bytes.append(contentsOf: encoded) }

    /// An array of items to follow, ended by `breakStop` (RFC 8949 §3.2.2): valid CBOR, but not
    /// deterministic encoding; for a result whose number of items is not known when it starts.
    public mutating func indefiniteArrayStart() { bytes.append(0x9F) }
    public mutating func breakStop() { bytes.append(0xFF) }

    /// The bytes written so far; the writer starts over empty (with the same capacity reserved).
    public mutating func takeBytes() -> [UInt8] {
        let taken = bytes
        bytes = []
        bytes.reserveCapacity(taken.capacity)
        return taken
    }
}

/// The eight CBOR major types (RFC 8949 §3.1).
public enum CBORMajorType: UInt8, Sendable {
    case unsigned = 0, negative = 1, bytes = 2, text = 3, array = 4, map = 5, tag = 6, simple = 7
}

/// Half-precision conversions, written out because `Float16` is not available on every platform.
enum CBORFloat {
    /// The IEEE 754 binary16 bit pattern of `d` if it is exactly representable, else nil.
    static func halfBits(exactly d: Double) -> UInt16? {
        guard let f = Float(exactly: d) else { return nil }
        let bits = f.bitPattern
        let sign = UInt16((bits >> 16) & 0x8000)
        let exponent = Int((bits >> 23) & 0xFF)
        let mantissa = bits & 0x7F_FFFF
        if exponent == 0xFF {  // infinity (NaN handled by the caller)
            return mantissa == 0 ? sign | 0x7C00 : nil
        }
        if exponent == 0 && mantissa == 0 { return sign }  // ±0
        if exponent == 0 { return nil }  // float subnormals are far below half range
        let e = exponent - 127
        if e >= -14 && e <= 15 {  // half normal: 10 mantissa bits
            guard mantissa & 0x1FFF == 0 else { return nil }
            return sign | UInt16(e + 15) << 10 | UInt16(mantissa >> 13)
        }
        if e >= -24 && e < -14 {  // half subnormal: value = m * 2^-24
            let full = mantissa | 0x80_0000  // implicit leading bit, value = full * 2^(e-23)
            let shift = UInt32(-e - 1)  // (e - 23) - (-24) = e + 1 -> right shift by -(e+1)
            guard full & ((1 << shift) - 1) == 0 else { return nil }
            return sign | UInt16(full >> shift)
        }
        return nil
    }

    /// The Double value of a binary16 bit pattern.
    static func double(fromHalf h: UInt16) -> Double {
        let sign: Double = (h & 0x8000) != 0 ? -1 : 1
        let exponent = Int((h >> 10) & 0x1F)
        let mantissa = Double(h & 0x3FF)
        switch exponent {
        case 0: return sign * mantissa * 0x1p-24
        case 31: return mantissa == 0 ? sign * .infinity : .nan
        default: return sign * (1 + mantissa / 1024) * Double(sign: .plus, exponent: exponent - 15, significand: 1)
        }
    }
}
