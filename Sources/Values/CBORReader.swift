// Canonical CBOR reader (RFC 8949). Validating, bounded, never traps on input.
//
// Every read checks, before touching or allocating anything, that:
//   * the argument is in its shortest form and not indefinite (§4.2.1) when `requireCanonical`
//     (without it, indefinite-length arrays are read, still bounded by `maxContainerCount`);
//   * a string's or container's claimed length fits in the bytes that remain (so a hostile length
//     can never size an allocation: each array element / map pair takes at least one byte);
//   * strings and containers stay under the configured limits, and nesting under `maxDepth`
//     (depth is tracked by the callers that recurse, through `enter()` / `leave()`);
//   * text strings are valid UTF-8 (§3.1, major type 3).
// Every failure is a `CBORError` carrying the byte offset where it was detected.

/// Bounds applied while decoding untrusted input.
public struct CBORLimits: Sendable, Equatable {
    public var maxInputBytes: Int
    public var maxDepth: Int
    public var maxStringBytes: Int
    public var maxContainerCount: Int
    /// Reject encodings that are valid CBOR but not in RFC 8949 §4.2 deterministic form.
    public var requireCanonical: Bool

    public init(maxInputBytes: Int = 16 << 20, maxDepth: Int = 64, maxStringBytes: Int = 8 << 20,
                maxContainerCount: Int = 1 << 20, requireCanonical: Bool = true) {
        self.maxInputBytes = maxInputBytes
        self.maxDepth = maxDepth
        self.maxStringBytes = maxStringBytes
        self.maxContainerCount = maxContainerCount
        self.requireCanonical = requireCanonical
    }

    public static let `default` = CBORLimits()
}

/// Why decoding failed, and at which byte offset.
public enum CBORError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated(offset: Int)
    case inputTooLarge(size: Int, limit: Int)
    case reservedAdditionalInfo(offset: Int)
    case indefiniteLength(offset: Int)
    case nonCanonical(offset: Int, reason: String)
    case unexpectedType(offset: Int, expected: String)
    case lengthExceedsLimit(offset: Int, length: UInt64, limit: Int)
    case tooDeep(offset: Int, limit: Int)
    case invalidUTF8(offset: Int)
    case integerOutOfRange(offset: Int)
    case unsupported(offset: Int, what: String)
    case duplicateOrUnsortedKey(offset: Int)
    case trailingBytes(offset: Int)
    case invalidValue(offset: Int, reason: String)

    public var description: String {
        switch self {
        case .truncated(let o): "CBOR input ends early at byte \(o)"
        case .inputTooLarge(let s, let l): "CBOR input of \(s) bytes exceeds the limit of \(l)"
        case .reservedAdditionalInfo(let o): "reserved additional-information value at byte \(o)"
        case .indefiniteLength(let o): "indefinite-length item at byte \(o) (not allowed)"
        case .nonCanonical(let o, let r): "non-canonical encoding at byte \(o): \(r)"
        case .unexpectedType(let o, let e): "unexpected data item at byte \(o), expected \(e)"
        case .lengthExceedsLimit(let o, let n, let l): "length \(n) at byte \(o) exceeds the limit \(l)"
        case .tooDeep(let o, let l): "nesting deeper than \(l) at byte \(o)"
        case .invalidUTF8(let o): "text string at byte \(o) is not valid UTF-8"
        case .integerOutOfRange(let o): "integer at byte \(o) is out of range"
        case .unsupported(let o, let w): "unsupported CBOR item at byte \(o): \(w)"
        case .duplicateOrUnsortedKey(let o): "map key at byte \(o) is duplicated or out of canonical order"
        case .trailingBytes(let o): "unexpected bytes after the data item at byte \(o)"
        case .invalidValue(let o, let r): "invalid value at byte \(o): \(r)"
        }
    }
}

/// A decoded initial byte plus argument.
public struct CBORHead: Sendable, Equatable {
    public var major: CBORMajorType
    public var additional: UInt8
    public var argument: UInt64
    /// Offset of the initial byte.
    public var offset: Int
}

/// Reads canonical CBOR from a byte array. A value type: `position` advances as items are read.
public struct CBORReader: Sendable {
    public let bytes: [UInt8]
    public private(set) var position: Int
    public let limits: CBORLimits
    public private(set) var depth = 0

    public init(_ bytes: [UInt8], limits: CBORLimits = .default) throws(CBORError) {
        guard bytes.count <= limits.maxInputBytes else {
            throw .inputTooLarge(size: bytes.count, limit: limits.maxInputBytes)
        }
        self.bytes = bytes
        self.position = 0
        self.limits = limits
    }

    public var isAtEnd: Bool { position >= bytes.count }
    public var remaining: Int { bytes.count - position }

    /// Throws unless every byte was consumed.
    public func expectEnd() throws(CBORError) {
        guard isAtEnd else { throw .trailingBytes(offset: position) }
    }

    /// Increments nesting depth; callers pair it with `leave()` around each container they recurse into.
    public mutating func enter() throws(CBORError) {
        depth += 1
        guard depth <= limits.maxDepth else { throw .tooDeep(offset: position, limit: limits.maxDepth) }
    }

    public mutating func leave() { depth -= 1 }

    /// Major type of the next item without consuming it.
    public func peekMajor() throws(CBORError) -> CBORMajorType {
        guard position < bytes.count else { throw .truncated(offset: position) }
        return CBORMajorType(rawValue: bytes[position] >> 5) ?? .simple
    }

    /// True (without consuming) if the next item is `null`.
    public func peekIsNull() -> Bool { position < bytes.count && bytes[position] == 0xF6 }

    public mutating func head() throws(CBORError) -> CBORHead {
        let start = position
        guard position < bytes.count else { throw .truncated(offset: start) }
        let initial = bytes[position]
        position += 1
        let major = CBORMajorType(rawValue: initial >> 5) ?? .simple
        let ai = initial & 0x1F
        let argument: UInt64
        switch ai {
        case 0..<24:
            argument = UInt64(ai)
        case 24, 25, 26, 27:
            let count = 1 << Int(ai - 24)
            guard remaining >= count else { throw .truncated(offset: start) }
            var v: UInt64 = 0
            for i in 0..<count { v = v << 8 | UInt64(bytes[position + i]) }
            position += count
            argument = v
            // Shortest form (§4.2.1); for major 7 the width selects the float size instead.
            if limits.requireCanonical && major != .simple {
                let minimum: UInt64 = switch ai { case 24: 24; case 25: 0x100; case 26: 0x1_0000; default: 0x1_0000_0000 }
                guard v >= minimum else { throw .nonCanonical(offset: start, reason: "argument not in shortest form") }
            }
        case 31:
            throw .indefiniteLength(offset: start)
        default:
            throw .reservedAdditionalInfo(offset: start)
        }
        return CBORHead(major: major, additional: ai, argument: argument, offset: start)
    }

    public mutating func expect(_ major: CBORMajorType, _ what: String) throws(CBORError) -> CBORHead {
        let h = try head()
        guard h.major == major else { throw .unexpectedType(offset: h.offset, expected: what) }
        return h
    }

    public mutating func unsigned() throws(CBORError) -> UInt64 {
        try expect(.unsigned, "unsigned integer").argument
    }

    public mutating func int() throws(CBORError) -> Int64 {
        let h = try head()
        switch h.major {
        case .unsigned:
            guard h.argument <= UInt64(Int64.max) else { throw .integerOutOfRange(offset: h.offset) }
            return Int64(h.argument)
        case .negative:
            guard h.argument <= UInt64(Int64.max) else { throw .integerOutOfRange(offset: h.offset) }
            return -1 - Int64(h.argument)
        default:
            throw .unexpectedType(offset: h.offset, expected: "integer")
        }
    }

    /// Reads an unsigned integer and checks it is at most `max`.
    public mutating func unsigned(max: UInt64) throws(CBORError) -> UInt64 {
        let offset = position
        let v = try unsigned()
        guard v <= max else { throw .integerOutOfRange(offset: offset) }
        return v
    }

    private mutating func stringBody(_ h: CBORHead) throws(CBORError) -> Range<Int> {
        guard h.argument <= UInt64(limits.maxStringBytes) else {
            throw .lengthExceedsLimit(offset: h.offset, length: h.argument, limit: limits.maxStringBytes)
        }
        let n = Int(h.argument)
        guard n <= remaining else { throw .truncated(offset: h.offset) }
        let range = position..<(position + n)
        position += n
        return range
    }

    public mutating func text() throws(CBORError) -> String {
        let h = try expect(.text, "text string")
        let range = try stringBody(h)
        if let s = Self.ascii(bytes, range) { return s }
        guard let s = String(validating: bytes[range], as: UTF8.self) else { throw .invalidUTF8(offset: h.offset) }
        return s
    }

    /// The string when `bytes[range]` is all ASCII (every key of a sync message, most ids), else
    /// nil. ASCII is valid UTF-8 as it is, so it needs no validation; the generic
    /// `String(validating:)` on a slice cost ~700 instructions a string in runtime metadata
    /// lookups alone, about a quarter of decoding a `changes` message (docs/PERFORMANCE.md).
    static func ascii(_ bytes: [UInt8], _ range: Range<Int>) -> String? {
        bytes.withUnsafeBufferPointer { all -> String? in
            let body = UnsafeBufferPointer(rebasing: all[range])
            var high: UInt8 = 0
            for b in body { high |= b }
            return high < 0x80 ? String(decoding: body, as: UTF8.self) : nil
        }
    }

    /// Reads a text string and returns the range of its whole encoding (head + body), for key ordering checks.
    public mutating func textWithEncodedRange() throws(CBORError) -> (String, Range<Int>) {
        let start = position
        let s = try text()
        return (s, start..<position)
    }

    public mutating func byteString() throws(CBORError) -> [UInt8] {
        let h = try expect(.bytes, "byte string")
        return Array(bytes[try stringBody(h)])
    }

    private func checkCount(_ h: CBORHead, perItem: Int) throws(CBORError) -> Int {
        guard h.argument <= UInt64(limits.maxContainerCount) else {
            throw .lengthExceedsLimit(offset: h.offset, length: h.argument, limit: limits.maxContainerCount)
        }
        let n = Int(h.argument)
        // Each element needs at least one byte: a count larger than what remains is a lie.
        guard n <= remaining / perItem else { throw .truncated(offset: h.offset) }
        return n
    }

    public mutating func arrayHeader() throws(CBORError) -> Int {
        try checkCount(try expect(.array, "array"), perItem: 1)
    }

    /// Reads an array header and checks its count is exactly `count`.
    public mutating func arrayHeader(count: Int) throws(CBORError) {
        let offset = position
        let n = try arrayHeader()
        guard n == count else { throw .unexpectedType(offset: offset, expected: "array of \(count) items") }
    }

    /// True (without consuming) if the next item starts an indefinite-length array (`0x9f`) that
    /// these limits accept: only when `requireCanonical` is off (streamed results, RFC 8949 §3.2.2).
    public func peekIsAcceptedIndefiniteArray() -> Bool {
        !limits.requireCanonical && position < bytes.count && bytes[position] == 0x9F
    }

    /// Reads the start of an indefinite-length array; then call `indefiniteArrayEnds` before each
    /// item. The caller counts the items against `maxContainerCount`.
    public mutating func indefiniteArrayStart() throws(CBORError) {
        guard peekIsAcceptedIndefiniteArray() else { throw .indefiniteLength(offset: position) }
        position += 1
    }

    /// Consumes the break (`0xff`) and returns true if the array ends here; false if an item follows.
    public mutating func indefiniteArrayEnds() throws(CBORError) -> Bool {
        guard position < bytes.count else { throw .truncated(offset: position) }
        guard bytes[position] == 0xFF else { return false }
        position += 1
        return true
    }

    public mutating func mapHeader() throws(CBORError) -> Int {
        try checkCount(try expect(.map, "map"), perItem: 2)
    }

    public mutating func bool() throws(CBORError) -> Bool {
        let h = try expect(.simple, "boolean")
        switch (h.additional, h.argument) {
        case (20, _): return false
        case (21, _): return true
        default: throw .unexpectedType(offset: h.offset, expected: "boolean")
        }
    }

    public mutating func null() throws(CBORError) {
        let h = try expect(.simple, "null")
        guard h.additional == 22 else { throw .unexpectedType(offset: h.offset, expected: "null") }
    }

    /// Consumes a `null` if one is next; returns whether it did.
    public mutating func skipNull() -> Bool {
        guard peekIsNull() else { return false }
        position += 1
        return true
    }

    /// Reads a float of any width; enforces the shortest exact width when canonical (§4.2.2).
    public mutating func double() throws(CBORError) -> Double {
        let h = try expect(.simple, "floating-point number")
        let d: Double
        switch h.additional {
        case 25: d = CBORFloat.double(fromHalf: UInt16(h.argument))
        case 26: d = Double(Float(bitPattern: UInt32(h.argument)))
        case 27: d = Double(bitPattern: h.argument)
        default: throw .unexpectedType(offset: h.offset, expected: "floating-point number")
        }
        if limits.requireCanonical {
            var w = CBORWriter(capacity: 9)
            w.double(d)
            let width = w.bytes.count - 1
            let expected = 1 << Int(h.additional - 24)
            let canonicalNaN = !d.isNaN || h.argument == 0x7E00 && h.additional == 25
            guard width == expected && canonicalNaN else {
                throw .nonCanonical(offset: h.offset, reason: "float not in shortest form")
            }
        }
        return d
    }

    /// Skips one complete data item of any type (bounded by depth like everything else).
    public mutating func skipItem() throws(CBORError) {
        let h = try head()
        switch h.major {
        case .unsigned, .negative: return
        case .bytes, .text: _ = try stringBody(h)
        case .array:
            let n = try checkCount(h, perItem: 1)
            try enter()
            for _ in 0..<n { try skipItem() }
            leave()
        case .map:
            let n = try checkCount(h, perItem: 2)
            try enter()
            for _ in 0..<(2 * n) { try skipItem() }
            leave()
        case .tag:
            throw .unsupported(offset: h.offset, what: "tag \(h.argument)")
        case .simple:
            switch h.additional {
            case 20, 21, 22, 25, 26, 27: return
            default: throw .unsupported(offset: h.offset, what: "simple value \(h.argument)")
            }
        }
    }

    /// Byte range of the encoding of the next item, which is skipped.
    public mutating func skipItemRange() throws(CBORError) -> Range<Int> {
        let start = position
        try skipItem()
        return start..<position
    }

    /// True if the encoded bytes at `a` sort strictly before those at `b` (§4.2.1 key order).
    public func encodedLess(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
        bytes[a].lexicographicallyPrecedes(bytes[b])
    }
}
