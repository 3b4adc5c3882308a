// Values: the JSON-like value every layer shares (documents, DQL results, REST bodies, sync payloads),
// with integer and floating-point numbers kept apart so no layer loses precision silently.
// Codecs live beside it: JSON (JSONCodec.swift) and canonical CBOR (CBOR*.swift).

/// A JSON value with a distinct 64-bit integer case.
///
/// MISSING (an absent field) is deliberately *not* a case: absence is modelled by `Optional<Value>`
/// where it matters (DQL evaluation, materialized documents), so that NULL and MISSING never blur.
public enum Value: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([Value])
    case object([String: Value])
}

/// Equality is exact: strings (and object keys) are equal only when their UTF-8 bytes are, as in
/// PostgreSQL's jsonb, not when they are merely canonically equivalent as Swift's `String ==` has
/// it (ExactText.swift). Numbers compare as Swift's do (int and double are different cases).
extension Value: Hashable {
    public static func == (a: Value, b: Value) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.int(let x), .int(let y)): return x == y
        case (.double(let x), .double(let y)): return x == y
        case (.string(let x), .string(let y)): return x.utf8Equals(y)
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)):
            guard x.count == y.count else { return false }
            for (k, v) in x {
                // A dictionary holds at most one key per canonical-equivalence class, so the one
                // `y` finds for `k` is the only candidate; it must also match byte for byte.
                guard let i = y.index(forKey: k), y[i].key.utf8Equals(k), y[i].value == v else { return false }
            }
            return true
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .bool(let b): hasher.combine(1 as UInt8); hasher.combine(b)
        case .int(let i): hasher.combine(2 as UInt8); hasher.combine(i)
        case .double(let d): hasher.combine(3 as UInt8); hasher.combine(d)
        // String's hash is consistent with byte equality (byte-equal strings hash alike).
        case .string(let s): hasher.combine(4 as UInt8); hasher.combine(s)
        case .array(let a): hasher.combine(5 as UInt8); hasher.combine(a)
        case .object(let o): hasher.combine(6 as UInt8); hasher.combine(o)
        }
    }
}

extension Value {
    /// Name of the value's type as DQL's `type()` function reports it.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int, .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    public var objectValue: [String: Value]? { if case .object(let o) = self { o } else { nil } }
    public var arrayValue: [Value]? { if case .array(let a) = self { a } else { nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as a Double if it is a number of either kind.
    public var doubleValue: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    /// The value as an Int64 if it is an integer, or a double with an exact integer value.
    public var int64Value: Int64? {
        switch self {
        case .int(let i): i
        case .double(let d): (d.rounded() == d && abs(d) < 9.2e18) ? Int64(d) : nil
        default: nil
        }
    }

    public subscript(key: String) -> Value? {
        if case .object(let o) = self { o[key] } else { nil }
    }

    /// The form PostgreSQL's jsonb equality sees: numbers compare by value there (`{"k": 1}` and
    /// `{"k": 1.0}` are one primary key), while `==` here tells an integer from a double. A whole
    /// double below 2^63 in magnitude becomes the integer it equals, in arrays and objects too;
    /// everything else is unchanged. Two ids are one document exactly when these are `==`.
    public var jsonbIdentity: Value {
        switch self {
        case .double(let d) where d.rounded() == d && d.magnitude < 9_223_372_036_854_775_808: .int(Int64(d))
        case .array(let a): .array(a.map(\.jsonbIdentity))
        case .object(let o): .object(o.mapValues(\.jsonbIdentity))
        default: self
        }
    }
}

/// A document `_id` compared as PostgreSQL's jsonb primary key compares it (`jsonbIdentity`):
/// `{k: 1}` and `{k: 1.0}` are one key, strings are byte-exact. For stores keyed by id that must
/// hold one document where the server holds one row (a small peer's collections, `DocumentRef`).
public struct DocumentIdentity: Hashable, Sendable {
    /// The id in the form it was given.
    public let id: Value

    public init(_ id: Value) { self.id = id }

    public static func == (a: DocumentIdentity, b: DocumentIdentity) -> Bool {
        if a.id == b.id { return true }
        switch (a.id, b.id) {
        case (.string, _), (_, .string): return false  // a string is its own identity: no second comparison
        default: return a.id.jsonbIdentity == b.id.jsonbIdentity
        }
    }

    public func hash(into hasher: inout Hasher) {
        // Strings (nearly every id) are their own identity: no conversion.
        if case .string = id { hasher.combine(id) } else { hasher.combine(id.jsonbIdentity) }
    }
}

extension Value: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: Value...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, Value)...) {
        var o: [String: Value] = [:]
        for (k, v) in elements { o[k] = v }
        self = .object(o)
    }
}
