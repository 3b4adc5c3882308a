// Canonical CBOR for `Value` (RFC 8949 §4.2 deterministic encoding).
//
//   Value              CBOR
//   -----------------  ---------------------------------------------------------------
//   .null              simple 22 (0xf6)
//   .bool(b)           simple 20 / 21 (0xf4 / 0xf5)
//   .int(i)            major 0 (i >= 0) or major 1 (i < 0), shortest argument
//   .double(d)         major 7 float, shortest exact width; NaN = 0xf97e00
//   .string(s)         major 3, UTF-8
//   .array(a)          major 4, definite length
//   .object(o)         major 5, definite length, text keys sorted by encoded bytes (§4.2.1):
//                      shorter UTF-8 first, then bytewise; no duplicates
//
// Integers and floats stay distinct (an integral double is still written as a float), so a
// round trip is exact. Tags, byte strings, undefined and other simple values have no `Value`
// counterpart and are rejected with a typed error, as are integers outside Int64.

extension CBORWriter {
    public mutating func value(_ v: Value) {
        switch v {
        case .null: null()
        case .bool(let b): bool(b)
        case .int(let i): int(i)
        case .double(let d): double(d)
        case .string(let s): text(s)
        case .array(let a):
            arrayHeader(a.count)
            for e in a { value(e) }
        case .object(let o):
            mapHeader(o.count)
            for k in CBORKeyOrder.sorted(o.keys) {
                text(k)
                // The key came from the dictionary's own key set.
                if let e = o[k] { value(e) }
            }
        }
    }
}

/// RFC 8949 §4.2.1 ordering of text-string keys: by encoded bytes, i.e. shorter first, then bytewise.
public enum CBORKeyOrder {
    public static func less(_ a: String, _ b: String) -> Bool {
        let ac = a.utf8.count, bc = b.utf8.count
        if ac != bc { return ac < bc }
        // Native strings are contiguous UTF-8: compare the bytes directly (the generic path is slow).
        let fast = a.utf8.withContiguousStorageIfAvailable { ab in
            b.utf8.withContiguousStorageIfAvailable { bb in
                for i in 0..<ab.count where ab[i] != bb[i] { return ab[i] < bb[i] }
                return false
            }
        }
        if let r = fast ?? nil { return r }
        return a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    public static func sorted<S: Sequence<String>>(_ keys: S) -> [String] {
        keys.sorted(by: less)
    }
}

extension CBORReader {
    /// Reads one `Value`, recursing at most `limits.maxDepth` levels.
    public mutating func value() throws(CBORError) -> Value {
        switch try peekMajor() {
        case .unsigned, .negative:
            return .int(try int())
        case .text:
            return .string(try text())
        case .array where peekIsAcceptedIndefiniteArray():
            let start = position
            try indefiniteArrayStart()
            try enter()
            var a: [Value] = []
            while try !indefiniteArrayEnds() {
                guard a.count < limits.maxContainerCount else {
                    throw .lengthExceedsLimit(offset: start, length: UInt64(a.count) + 1, limit: limits.maxContainerCount)
                }
                a.append(try value())
            }
            leave()
            return .array(a)
        case .array:
            let n = try arrayHeader()
            try enter()
            var a: [Value] = []
            a.reserveCapacity(n)
            for _ in 0..<n { a.append(try value()) }
            leave()
            return .array(a)
        case .map:
            let n = try mapHeader()
            try enter()
            var o: [String: Value] = [:]
            o.reserveCapacity(n)
            var previous: Range<Int>? = nil
            for _ in 0..<n {
                let keyOffset = position
                guard try peekMajor() == .text else { throw .unexpectedType(offset: keyOffset, expected: "text map key") }
                let (k, range) = try textWithEncodedRange()
                // Keys are names (ExactText.swift): a dictionary would merge NFC and NFD spellings.
                if !k.isNFC { throw .invalidValue(offset: keyOffset, reason: "map key is not in Unicode Normalization Form C") }
                if let p = previous, !encodedLess(p, range) {
                    if limits.requireCanonical || o[k] != nil { throw .duplicateOrUnsortedKey(offset: keyOffset) }
                }
                previous = range
                o[k] = try value()
            }
            leave()
            return .object(o)
        case .simple:
            let offset = position
            switch bytes[offset] & 0x1F {
            case 25, 26, 27: return .double(try double())
            case 20, 21: return .bool(try bool())
            case 22:
                try null()
                return .null
            default:
                let h = try head()
                throw .unsupported(offset: offset, what: "simple value \(h.argument)")
            }
        case .bytes:
            throw .unsupported(offset: position, what: "byte string in a JSON value")
        case .tag:
            throw .unsupported(offset: position, what: "tag")
        }
    }
}

/// One-call helpers for whole-buffer encoding and decoding of a `Value`.
public enum CBORValueCodec {
    public static func encode(_ v: Value) -> [UInt8] {
        var w = CBORWriter()
        w.value(v)
        return w.bytes
    }

    /// Decodes exactly one `Value` occupying all of `bytes`.
    public static func decode(_ bytes: [UInt8], limits: CBORLimits = .default) throws(CBORError) -> Value {
        var r = try CBORReader(bytes, limits: limits)
        let v = try r.value()
        try r.expectEnd()
        return v
    }
}
