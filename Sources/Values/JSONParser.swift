// JSON text -> Value, RFC 8259, over raw UTF-8 bytes (no Foundation).
//
//   JSON-text = ws value ws                                  (§2)
//   value     = false / null / true / object / array / number / string
//   object    = '{' ws [ member *( ',' member ) ] ws '}'     (§4)
//   member    = string ws ':' ws value
//   array     = '[' ws [ value *( ',' value ) ] ws ']'       (§5)
//   number    = [ '-' ] int [ frac ] [ exp ]                 (§6)
//   int       = '0' / ( digit1-9 *DIGIT )
//   string    = '"' *char '"'                                (§7)
//   ws        = *( %x20 / %x09 / %x0A / %x0D )
//
// Choices where RFC 8259 leaves room (each is a documented, tested behaviour):
// - Integers (no fraction, no exponent) that fit Int64 become `.int`; every other number `.double`.
//   `-0` becomes `.double(-0.0)` so the sign survives a round trip. A number whose magnitude
//   overflows Double (e.g. `1e400`) is rejected (§9 allows limits on range) rather than becoming ±inf.
// - Duplicate object keys are rejected by default (§4 says names SHOULD be unique; silently picking one
//   lets two readers of the same text disagree). `JSONLimits.duplicateKeys = .lastWins` relaxes it.
// - Lone UTF-16 surrogate escapes (`"\uD800"`) are rejected: they cannot be represented in a Swift String.
// - Input must be valid UTF-8 (§8.1); a byte order mark is rejected.
// - Depth and size limits are checked before any allocation they would govern.

/// Limits applied while parsing JSON from an untrusted source.
public struct JSONLimits: Sendable, Hashable {
    public enum DuplicateKeys: Sendable, Hashable { case reject, lastWins }
    /// Deepest nesting of arrays/objects accepted.
    public var maxDepth: Int
    /// Largest input accepted, in bytes. Every allocation the parser makes is bounded by it.
    public var maxInputBytes: Int
    public var duplicateKeys: DuplicateKeys
    /// Object keys are names: by default they must be in Unicode NFC (ExactText.swift), because a
    /// `[String: Value]` merges canonically equivalent keys that PostgreSQL's jsonb keeps apart.
    /// Off only for text BigPeer itself stored earlier.
    public var requireNFCKeys: Bool

    public init(maxDepth: Int = 512, maxInputBytes: Int = 64 << 20, duplicateKeys: DuplicateKeys = .reject, requireNFCKeys: Bool = true) {
        self.maxDepth = maxDepth
        self.maxInputBytes = maxInputBytes
        self.duplicateKeys = duplicateKeys
        self.requireNFCKeys = requireNFCKeys
    }

    public static let `default` = JSONLimits()
    /// For JSON read back from the database: keys as stored.
    public static let stored = JSONLimits(requireNFCKeys: false)
}

/// Why a JSON text was rejected, with the byte offset (0-based) and line/column (1-based, column in bytes).
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        case unexpectedEndOfInput
        case unexpectedByte(UInt8)
        case invalidNumber
        case numberOutOfRange
        case invalidEscape
        case loneSurrogate
        case controlCharacterInString
        case invalidUTF8
        case duplicateKey(String)
        case keyNotNFC(String)
        case tooDeep(limit: Int)
        case inputTooLarge(limit: Int)
        case trailingContent
    }

    public let kind: Kind
    public let offset: Int
    public let line: Int
    public let column: Int

    public var description: String {
        let what: String
        switch kind {
        case .unexpectedEndOfInput: what = "unexpected end of input"
        case .unexpectedByte(let b): what = "unexpected byte 0x\(String(b, radix: 16))" + (b >= 0x20 && b < 0x7F ? " '\(Character(Unicode.Scalar(b)))'" : "")
        case .invalidNumber: what = "invalid number"
        case .numberOutOfRange: what = "number out of range"
        case .invalidEscape: what = "invalid escape sequence"
        case .loneSurrogate: what = "unpaired UTF-16 surrogate escape"
        case .controlCharacterInString: what = "unescaped control character in string"
        case .invalidUTF8: what = "invalid UTF-8"
        case .duplicateKey(let k): what = "duplicate object key \"\(k)\""
        case .keyNotNFC(let k): what = "object key \"\(k)\" is not in Unicode Normalization Form C (normalize keys to NFC)"
        case .tooDeep(let limit): what = "nesting deeper than \(limit)"
        case .inputTooLarge(let limit): what = "input larger than \(limit) bytes"
        case .trailingContent: what = "unexpected content after the JSON value"
        }
        return "JSON: \(what) at line \(line), column \(column)"
    }

    /// Builds the error, computing line and column from the input (only on the error path).
    init(_ kind: Kind, at offset: Int, in bytes: UnsafeBufferPointer<UInt8>) {
        self.kind = kind
        self.offset = offset
        var line = 1
        var lineStart = 0
        var i = 0
        let end = min(offset, bytes.count)
        while i < end {
            if bytes[i] == 0x0A { line += 1; lineStart = i + 1 }
            i += 1
        }
        self.line = line
        self.column = offset - lineStart + 1
    }
}

public enum JSON {
    /// Parses one JSON text (RFC 8259 §2) into a `Value`.
    public static func parse(_ bytes: [UInt8], limits: JSONLimits = .default) throws(JSONParseError) -> Value {
        let result: Result<Value, JSONParseError> = bytes.withUnsafeBufferPointer { buffer in
            parseResult(buffer, limits: limits)
        }
        return try result.get()
    }

    /// Parses one JSON text held in a Swift string (its UTF-8 view).
    public static func parse(_ text: String, limits: JSONLimits = .default) throws(JSONParseError) -> Value {
        var text = text
        let result: Result<Value, JSONParseError> = text.withUTF8 { buffer in
            parseResult(buffer, limits: limits)
        }
        return try result.get()
    }

    /// Parses from raw memory; the bytes are only read during the call.
    public static func parse(_ raw: UnsafeRawBufferPointer, limits: JSONLimits = .default) throws(JSONParseError) -> Value {
        try parseResult(raw.bindMemory(to: UInt8.self), limits: limits).get()
    }

    static func parseResult(_ buffer: UnsafeBufferPointer<UInt8>, limits: JSONLimits) -> Result<Value, JSONParseError> {
        var parser = JSONParser(bytes: buffer, limits: limits)
        do {
            return .success(try parser.parseDocument())
        } catch {
            return .failure(error)
        }
    }
}

struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let limits: JSONLimits
    var index = 0
    var depth = 0
    /// Members of the objects being parsed, innermost last: an object's members are collected
    /// here and its dictionary is built once at its end with the exact capacity (built member by
    /// member it reallocated and rehashed as it grew: a few times per small object, and ~17 times
    /// for a bulk INSERT's 100,000 arguments). Reused across objects, so it allocates rarely.
    var members: [(key: String, value: Value, offset: Int)] = []

    init(bytes: UnsafeBufferPointer<UInt8>, limits: JSONLimits) {
        self.bytes = bytes
        self.limits = limits
    }

    func fail(_ kind: JSONParseError.Kind, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(kind, at: offset ?? index, in: bytes)
    }

    mutating func parseDocument() throws(JSONParseError) -> Value {
        guard bytes.count <= limits.maxInputBytes else { throw fail(.inputTooLarge(limit: limits.maxInputBytes), at: 0) }
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw fail(.trailingContent) }
        return value
    }

    @inline(__always) mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue() throws(JSONParseError) -> Value {
        guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case let b: throw fail(.unexpectedByte(b))
        }
    }

    mutating func expectLiteral(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        let start = word.utf8Start
        for k in 0..<count {
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            guard bytes[index] == start[k] else { throw fail(.unexpectedByte(bytes[index])) }
            index += 1
        }
    }

    mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        guard depth <= limits.maxDepth else { throw fail(.tooDeep(limit: limits.maxDepth)) }
    }

    mutating func parseObject() throws(JSONParseError) -> Value {
        try enterContainer()
        index += 1  // '{'
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1; depth -= 1
            return .object([:])
        }
        let base = members.count
        while true {
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            guard bytes[index] == UInt8(ascii: "\"") else { throw fail(.unexpectedByte(bytes[index])) }
            let keyOffset = index
            let key = try parseString()
            if limits.requireNFCKeys, !key.isNFC { throw fail(.keyNotNFC(key), at: keyOffset) }
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            guard bytes[index] == UInt8(ascii: ":") else { throw fail(.unexpectedByte(bytes[index])) }
            index += 1
            skipWhitespace()
            let value = try parseValue()
            members.append((key, value, keyOffset))
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            let b = bytes[index]
            index += 1
            if b == UInt8(ascii: ",") { skipWhitespace(); continue }
            if b == UInt8(ascii: "}") { break }
            throw fail(.unexpectedByte(b), at: index - 1)
        }
        depth -= 1
        var object = [String: Value](minimumCapacity: members.count - base)
        for m in members[base...] {
            if object.updateValue(m.value, forKey: m.key) != nil, limits.duplicateKeys == .reject {
                throw fail(.duplicateKey(m.key), at: m.offset)
            }
        }
        members.removeSubrange(base...)
        return .object(object)
    }

    mutating func parseArray() throws(JSONParseError) -> Value {
        try enterContainer()
        index += 1  // '['
        var array: [Value] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1; depth -= 1
            return .array(array)
        }
        while true {
            array.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEndOfInput) }
            let b = bytes[index]
            index += 1
            if b == UInt8(ascii: ",") { skipWhitespace(); continue }
            if b == UInt8(ascii: "]") { break }
            throw fail(.unexpectedByte(b), at: index - 1)
        }
        depth -= 1
        return .array(array)
    }
}
