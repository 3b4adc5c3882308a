import CLibPQ

/// The rows (or command status) of one statement.
///
/// Wraps libpq's `PGresult`, which is immutable once created and may be read from any thread
/// (libpq documents results as independent of their connection), so sharing it is safe: that is
/// the proof behind `@unchecked Sendable`. Values are decoded lazily from the result's own buffer.
public final class PostgresResult: @unchecked Sendable, RandomAccessCollection {
    let handle: OpaquePointer
    public let count: Int
    public let columnCount: Int

    init(handle: OpaquePointer) {
        self.handle = handle
        count = Int(PQntuples(handle))
        columnCount = Int(PQnfields(handle))
    }

    /// Column names, read from the result on demand (most callers decode by position).
    public var columnNames: [String] { (0..<columnCount).map { String(cString: PQfname(handle, Int32($0))) } }
    public var columnTypes: [PostgresOID] { (0..<columnCount).map { PQftype(handle, Int32($0)) } }
    public func columnType(_ i: Int) -> PostgresOID { PQftype(handle, Int32(i)) }
    /// True when column `i` came in binary format (`PostgresQuery.binaryResults`).
    public func isBinary(_ i: Int) -> Bool { PQfformat(handle, Int32(i)) == 1 }

    deinit { PQclear(handle) }

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }
    public subscript(position: Int) -> PostgresRow { PostgresRow(result: self, index: position) }

    /// Rows affected by INSERT/UPDATE/DELETE/COPY/SELECT (nil for commands that report none).
    public var affectedRows: Int? { Int(String(cString: PQcmdTuples(handle))) }

    /// The command tag, e.g. `INSERT 0 1`.
    public var commandTag: String { String(cString: PQcmdStatus(handle)) }

    public func columnIndex(_ name: String) -> Int? {
        let i = Int(PQfnumber(handle, PostgresQuery.quoteIdentifier(name)))
        return i >= 0 ? i : nil
    }
}

/// One row of a `PostgresResult`.
public struct PostgresRow: Sendable {
    public let result: PostgresResult
    public let index: Int

    public func isNull(_ column: Int) -> Bool { PQgetisnull(result.handle, Int32(index), Int32(column)) == 1 }

    /// Decodes a non-NULL column; NULL is an error (ask for an Optional type to allow it).
    public func decode<T: PostgresDecodable>(_ column: Int, as type: T.Type = T.self) throws(PostgresError) -> T {
        guard let v = try decode(column, as: Optional<T>.self) else {
            throw PostgresError.decoding(column: name(column), type: "\(T.self)", reason: "value is NULL")
        }
        return v
    }

    /// Decodes a column that may be NULL.
    public func decode<T: PostgresDecodable>(_ column: Int, as type: T?.Type) throws(PostgresError) -> T? {
        guard column >= 0 && column < result.columnCount else {
            throw PostgresError.decoding(column: "#\(column)", type: "\(T.self)", reason: "no such column")
        }
        if isNull(column) { return nil }
        let h = result.handle
        let len = Int(PQgetlength(h, Int32(index), Int32(column)))
        let ptr = UnsafeRawPointer(PQgetvalue(h, Int32(index), Int32(column))!)
        do {
            return try T.decode(postgresText: UnsafeRawBufferPointer(start: ptr, count: len), type: result.columnType(column))
        } catch {
            throw PostgresError.decoding(column: name(column), type: "\(T.self)", reason: error.reason)
        }
    }

    public func decode<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws(PostgresError) -> T {
        guard let i = result.columnIndex(name) else {
            throw PostgresError.decoding(column: name, type: "\(T.self)", reason: "no such column")
        }
        return try decode(i, as: T.self)
    }

    public func decode<T: PostgresDecodable>(_ name: String, as type: T?.Type) throws(PostgresError) -> T? {
        guard let i = result.columnIndex(name) else {
            throw PostgresError.decoding(column: name, type: "\(T.self)", reason: "no such column")
        }
        return try decode(i, as: T?.self)
    }

    /// Raw bytes of a column (in the result's format: text unless the query asked for
    /// `binaryResults`), or nil for NULL. The pointer is valid while `result` lives.
    public func withRawValue<R>(_ column: Int, _ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        if isNull(column) { return try body(nil) }
        let h = result.handle
        let len = Int(PQgetlength(h, Int32(index), Int32(column)))
        let ptr = UnsafeRawPointer(PQgetvalue(h, Int32(index), Int32(column))!)
        return try body(UnsafeRawBufferPointer(start: ptr, count: len))
    }

    private func name(_ column: Int) -> String {
        column < result.columnCount ? String(cString: PQfname(result.handle, Int32(column))) : "#\(column)"
    }
}

/// A notification received through LISTEN.
public struct PostgresNotification: Sendable, Equatable {
    public var channel: String
    public var payload: String
    public var backendPID: Int32
}
