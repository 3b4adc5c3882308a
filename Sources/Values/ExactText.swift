// Byte-exact text identity.
//
// Swift's `String ==`, `<`, and hashing follow Unicode canonical equivalence: "\u{212A}ate"
// (KELVIN SIGN) == "Kate", and "e\u{301}" == "é". PostgreSQL compares text and jsonb by bytes.
// Wherever a string is an identity (a collection name, an `_id`, a field name, a scope entry, a
// cache key), two spellings that PostgreSQL keeps apart must not be merged by Swift, or a key
// scoped to one name reads the other and a cache answers for the wrong document.
//
// BigPeer applies two rules, together (docs/SECURITY.md, "Names and identity"):
// - names (collection names, field names, index names, scope entries, object keys) must be in
//   Unicode Normalization Form C and hold no U+0000. Two distinct NFC strings are never
//   canonically equivalent, so among accepted names Swift's comparison and PostgreSQL's agree;
// - values (`_id` strings, string fields) are kept as sent and compared byte by byte
//   (`Value`'s equality, `ExactString`).

extension String {
    /// Whether the two strings have the same UTF-8 bytes (not merely canonically equivalent).
    @inlinable
    public func utf8Equals(_ other: String) -> Bool {
        if utf8.count != other.utf8.count { return false }
        if let equal = utf8.withContiguousStorageIfAvailable({ a in
            other.utf8.withContiguousStorageIfAvailable { b in a.elementsEqual(b) }
        }), let equal { return equal }
        return utf8.elementsEqual(other.utf8)
    }

    /// Whether the string is in Unicode Normalization Form C. ASCII (the common case) is checked
    /// byte by byte; anything else is compared with its NFC form.
    public var isNFC: Bool {
        if utf8.allSatisfy({ $0 < 0x80 }) { return true }
        // `_nfcCodeUnits` is the standard library's own NFC normalizer (the one `==` uses).
        return _nfcCodeUnits.elementsEqual(utf8)
    }
}

/// Why `name` cannot be a name (see the file comment), or nil when it can.
public enum NameRules {
    public static func problem(_ name: String) -> String? {
        if name.utf8.contains(0) { return "contains U+0000 (NUL)" }
        if !name.isNFC { return "is not in Unicode Normalization Form C (normalize it to NFC)" }
        return nil
    }
}

/// A string compared and hashed by its UTF-8 bytes: a dictionary or set key that never merges
/// canonically equivalent spellings.
public struct ExactString: Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let string: String

    public init(_ string: String) { self.string = string }
    public init(stringLiteral value: String) { string = value }

    public static func == (a: ExactString, b: ExactString) -> Bool { a.string.utf8Equals(b.string) }

    public func hash(into hasher: inout Hasher) {
        // Byte-equal strings have equal canonical hashes, so String's own hash stays consistent
        // with byte equality (canonically equivalent spellings merely collide).
        hasher.combine(string)
    }

    /// Byte order (which for UTF-8 is code-point order), as PostgreSQL's "C" collation.
    public static func < (a: ExactString, b: ExactString) -> Bool { a.string.utf8.lexicographicallyPrecedes(b.string.utf8) }

    public var description: String { string }
}
