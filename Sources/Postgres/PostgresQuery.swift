/// A statement and its parameters. Built by string interpolation, every interpolated value becomes a
/// `$n` bind parameter, so values can never change the statement's shape:
///
///     let q: PostgresQuery = "SELECT value FROM docs WHERE collection = \(name) AND id = \(id)"
///     // sql: "SELECT value FROM docs WHERE collection = $1 AND id = $2", binds: [name, id]
///
/// Identifiers go through `\(identifier: name)` (quoted and escaped). Raw SQL text can only enter
/// through the explicitly named `init(unsafeSQL:binds:)` or `\(unsafeRaw:)`.

import Quoting

public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public private(set) var sql: String
    public private(set) var binds: [PostgresBind]
    /// When true, the connection prepares the statement once and reuses it (hot paths).
    public var prepared = false
    /// When true, every column of the result comes in PostgreSQL's binary format (libpq's
    /// `resultFormat = 1`, all columns or none): bytea as its raw bytes instead of hex text at
    /// twice the size, int8 as 8 big-endian bytes, jsonb as a version byte and the JSON text.
    /// The caller then reads columns with `PostgresRow.withRawValue`, not the text decoders.
    public var binaryResults = false

    public init(unsafeSQL sql: String, binds: [PostgresBind] = []) {
        self.sql = sql
        self.binds = binds
    }

    public init(stringLiteral value: String) {
        sql = value
        binds = []
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
    }

    /// Appends a bind and returns its placeholder (`$n`), for builders that assemble SQL piecewise.
    public mutating func appendBind(_ value: some PostgresEncodable) -> String {
        binds.append(value.postgresBind)
        return "$\(binds.count)"
    }

    public mutating func appendUnsafeSQL(_ text: String) { sql += text }

    public var description: String { sql }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [PostgresBind] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        public mutating func appendInterpolation<T: PostgresEncodable>(_ value: T) {
            binds.append(value.postgresBind)
            sql += "$\(binds.count)"
        }

        public mutating func appendInterpolation<T: PostgresEncodable>(_ value: T?) {
            binds.append(value?.postgresBind ?? PostgresBind(null: T.postgresType))
            sql += "$\(binds.count)"
        }

        /// A quoted identifier (table, column, channel): `"na""me"`.
        public mutating func appendInterpolation(identifier: String) {
            sql += PostgresQuery.quoteIdentifier(identifier)
        }

        /// Raw SQL text. Never pass anything derived from input.
        public mutating func appendInterpolation(unsafeRaw text: String) { sql += text }
    }

    /// Quotes an identifier the way PostgreSQL reads it back (byte-wise; see `Quoting.Quote`).
    public static func quoteIdentifier(_ name: String) -> String { Quote.sqlIdentifier(name) }
}
