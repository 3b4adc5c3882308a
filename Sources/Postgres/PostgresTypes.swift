/// A PostgreSQL type OID.
public typealias PostgresOID = UInt32

public enum PostgresType {
    public static let bool: PostgresOID = 16
    public static let bytea: PostgresOID = 17
    public static let int8: PostgresOID = 20
    public static let int2: PostgresOID = 21
    public static let int4: PostgresOID = 23
    public static let text: PostgresOID = 25
    public static let oid: PostgresOID = 26
    public static let json: PostgresOID = 114
    public static let float4: PostgresOID = 700
    public static let float8: PostgresOID = 701
    public static let unknown: PostgresOID = 705
    public static let varchar: PostgresOID = 1043
    public static let timestamp: PostgresOID = 1114
    public static let timestamptz: PostgresOID = 1184
    public static let numeric: PostgresOID = 1700
    public static let uuid: PostgresOID = 2950
    public static let jsonb: PostgresOID = 3802
    public static let boolArray: PostgresOID = 1000
    public static let byteaArray: PostgresOID = 1001
    public static let int2Array: PostgresOID = 1005
    public static let int4Array: PostgresOID = 1007
    public static let textArray: PostgresOID = 1009
    public static let int8Array: PostgresOID = 1016
    public static let float8Array: PostgresOID = 1022
    public static let timestamptzArray: PostgresOID = 1185
    public static let jsonbArray: PostgresOID = 3807

    /// The array type whose elements are `element`, where we know it.
    static func arrayType(of element: PostgresOID) -> PostgresOID {
        switch element {
        case bool: boolArray
        case bytea: byteaArray
        case int2: int2Array
        case int4: int4Array
        case int8: int8Array
        case float8: float8Array
        case timestamptz: timestamptzArray
        case jsonb: jsonbArray
        default: textArray
        }
    }
}

/// One parameter as sent to the server: its type, its bytes (nil for NULL), and the format.
/// Text format for everything but bytea, which goes binary so 10 MB blobs are not hex-doubled.
public struct PostgresBind: Sendable, Equatable {
    public var type: PostgresOID
    public var bytes: [UInt8]?
    public var isBinary: Bool

    public init(type: PostgresOID, text: String) {
        self.type = type
        bytes = Array(text.utf8)
        isBinary = false
    }

    public init(type: PostgresOID, binary: [UInt8]) {
        self.type = type
        bytes = binary
        isBinary = true
    }

    public init(null type: PostgresOID) {
        self.type = type
        bytes = nil
        isBinary = false
    }
}

/// A JSON or JSONB value carried as its text; the layer above parses it with its own codec.
public struct PostgresJSON: Sendable, Hashable {
    public var text: String
    public init(_ text: String) { self.text = text }
}

/// An instant with microsecond precision (PostgreSQL's resolution), as microseconds since
/// 1970-01-01T00:00:00Z. Sessions run with `TimeZone=UTC`, so text values arrive as `+00`.
public struct PostgresTimestamp: Sendable, Hashable, Comparable {
    public var microsecondsSince1970: Int64
    public init(microsecondsSince1970: Int64) { self.microsecondsSince1970 = microsecondsSince1970 }
    public static func < (a: Self, b: Self) -> Bool { a.microsecondsSince1970 < b.microsecondsSince1970 }
}
