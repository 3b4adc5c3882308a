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
    /// Decodes one message occupying all of `bytes`.
    public static func decode(_ bytes: [UInt8], limits: SyncLimits = .default) throws(SyncProtocolError) -> SyncMessage {
        guard bytes.count <= limits.maxMessageSize else { throw .tooLarge(size: bytes.count, limit: limits.maxMessageSize) }
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
