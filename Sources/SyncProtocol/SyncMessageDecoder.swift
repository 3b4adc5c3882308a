// Decoding of sync messages (PROTOCOL.md §3, §4): canonical CBOR in, a validated `SyncMessage` or a
// typed `SyncProtocolError` out. Never traps, never allocates more than the input can justify.
//
//   bytes --CBORReader (canonical, bounded)--> Item tree --per-type field checks--> SyncMessage
//
// The generic tree is decoded first (every length checked against the remaining input by
// `CBORReader` before anything is allocated; nesting bounded), then each message type reads its
// fields: required ones must be present with the right CBOR type and range; unknown keys are
// ignored (§3); an unknown `"t"` is an error.

import Values

/// A decoded CBOR item restricted to what messages may contain (no tags, no undefined; text keys).
indirect enum SyncItem: Sendable {
    case unsigned(UInt64)
    case negative(UInt64)  // the value is -1 - argument
    case bytes([UInt8])
    case text(String)
    case array([SyncItem])
    case map([String: SyncItem])
    case bool(Bool)
    case null
    case double(Double)

    var cborName: String {
        switch self {
        case .unsigned: "an unsigned integer"
        case .negative: "a negative integer"
        case .bytes: "a byte string"
        case .text: "a text string"
        case .array: "an array"
        case .map: "a map"
        case .bool: "a boolean"
        case .null: "null"
        case .double: "a float"
        }
    }
}

public enum SyncMessageDecoder {
    /// `{"t": "credit", "bytes": `, canonical: the bytes every `credit` without other keys starts with.
    static let creditPrefix: [UInt8] = [0xa2, 0x61, 0x74, 0x66] + Array("credit".utf8) + [0x65] + Array("bytes".utf8)

    /// The `bytes` of a message that is exactly the canonical encoding of `credit` (what
    /// `SyncMessage.credit(bytes:).encode()` writes), else nil. A peer sends one for about every
    /// message it takes, so in a fan-out this is the most frequent message a server decodes, and
    /// the generic path (an item tree, a dictionary of fields) cost ~10,000 instructions for it
    /// (docs/PERFORMANCE.md). Anything else — another key, another order, a longer integer —
    /// goes through the generic decoder, which decides exactly as before.
    static func canonicalCredit(_ bytes: [UInt8]) -> UInt64? {
        let p = creditPrefix.count
        guard bytes.count > p, bytes.count <= p + 9, bytes.starts(with: creditPrefix) else { return nil }
        let head = bytes[p]
        guard head >> 5 == 0 else { return nil }  // major type 0: unsigned
        let info = head & 0x1f
        if info < 24 { return bytes.count == p + 1 ? UInt64(info) : nil }
        let length: Int, smallest: UInt64
        switch info {
        case 24: (length, smallest) = (1, 24)
        case 25: (length, smallest) = (2, 1 << 8)
        case 26: (length, smallest) = (4, 1 << 16)
        case 27: (length, smallest) = (8, 1 << 32)
        default: return nil
        }
        guard bytes.count == p + 1 + length else { return nil }
        var value: UInt64 = 0
        for b in bytes[(p + 1)...] { value = value << 8 | UInt64(b) }
        return value >= smallest ? value : nil  // shortest form only (canonical)
    }

    /// Decodes one message occupying all of `bytes`.
    public static func decode(_ bytes: [UInt8], limits: SyncLimits = .default) throws(SyncProtocolError) -> SyncMessage {
        guard bytes.count <= limits.maxMessageSize else { throw .tooLarge(size: bytes.count, limit: limits.maxMessageSize) }
        if let credit = canonicalCredit(bytes), credit >= 1, credit <= UInt64(limits.maxOutstandingCredit) { return .credit(bytes: credit) }
        return try decodeGeneric(bytes, limits: limits)
    }

    /// Any message, through the item tree (`decode` without its `credit` shortcut).
    static func decodeGeneric(_ bytes: [UInt8], limits: SyncLimits) throws(SyncProtocolError) -> SyncMessage {
        // Depth: message map, an array of entries, an entry map, then a Value of up to maxValueDepth.
        let cbor = CBORLimits(maxInputBytes: limits.maxMessageSize, maxDepth: limits.maxValueDepth + 4,
                              maxStringBytes: limits.maxMessageSize, maxContainerCount: limits.maxMessageSize, requireCanonical: true)
        var fields: [String: (item: SyncItem, size: Int)] = [:]
        do {
            var r = try CBORReader(bytes, limits: cbor)
            guard try r.peekMajor() == .map else { throw SyncProtocolError.notAMessage("not a CBOR map") }
            let n = try r.mapHeader()
            try r.enter()
            var previous: Range<Int>? = nil
            for _ in 0..<n {
                let key = try readKey(&r, after: &previous)
                let start = r.position
                let item = try readItem(&r)
                fields[key] = (item, r.position - start)
            }
            r.leave()
            try r.expectEnd()
        } catch let e as CBORError {
            throw .malformed(e)
        } catch let e as SyncProtocolError {
            throw e
        } catch {
            throw .notAMessage("\(error)")
        }
        guard let t = fields["t"] else { throw .notAMessage("no \"t\" key") }
        guard case .text(let type) = t.item else { throw .notAMessage("\"t\" is not a text string") }
        return try Fields(type: type, items: fields, limits: limits).message()
    }

    static func readKey(_ r: inout CBORReader, after previous: inout Range<Int>?) throws -> String {
        let offset = r.position
        guard try r.peekMajor() == .text else { throw CBORError.unexpectedType(offset: offset, expected: "text map key") }
        let (k, range) = try r.textWithEncodedRange()
        if let p = previous, !r.encodedLess(p, range) { throw CBORError.duplicateOrUnsortedKey(offset: offset) }
        previous = range
        return k
    }

    static func readItem(_ r: inout CBORReader) throws -> SyncItem {
        let offset = r.position
        switch try r.peekMajor() {
        case .unsigned: return .unsigned(try r.unsigned())
        case .negative: return .negative(try r.head().argument)
        case .bytes: return .bytes(try r.byteString())
        case .text: return .text(try r.text())
        case .array:
            let n = try r.arrayHeader()
            try r.enter()
            var a: [SyncItem] = []
            a.reserveCapacity(n)
            for _ in 0..<n { a.append(try readItem(&r)) }
            r.leave()
            return .array(a)
        case .map:
            let n = try r.mapHeader()
            try r.enter()
            var m: [String: SyncItem] = [:]
            m.reserveCapacity(n)
            var previous: Range<Int>? = nil
            for _ in 0..<n {
                let k = try readKey(&r, after: &previous)
                m[k] = try readItem(&r)
            }
            r.leave()
            return .map(m)
        case .tag:
            throw CBORError.unsupported(offset: offset, what: "tag")
        case .simple:
            switch r.bytes[offset] & 0x1F {
            case 20, 21: return .bool(try r.bool())
            case 22:
                try r.null()
                return .null
            case 25, 26, 27: return .double(try r.double())
            default: throw CBORError.unsupported(offset: offset, what: "simple value")
            }
        }
    }
}
