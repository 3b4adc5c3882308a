// Values: the JSON-like value every layer shares (documents, DQL results, REST bodies, sync payloads),
// with integer and floating-point numbers kept apart so no layer loses precision silently.
// Codecs live beside it: JSON (JSONCodec.swift) and canonical CBOR (CBOR*.swift).

/// A JSON value with a distinct 64-bit integer case.
///
/// MISSING (an absent field) is deliberately *not* a case: absence is modelled by `Optional<Value>`
/// where it matters (DQL evaluation, materialized documents), so that NULL and MISSING never blur.
public enum Value: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([Value])
    case object([String: Value])
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
