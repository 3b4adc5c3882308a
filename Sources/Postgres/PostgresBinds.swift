import CLibPQ
#if canImport(Glibc)
import Glibc
#endif

/// Lays all bind values out in one scratch buffer and hands libpq the parallel arrays it wants
/// (`PQsendQueryParams` / `PQsendQueryPrepared`: types, value pointers, lengths, formats).
///
///     scratch: [ value ptrs (8·n) | lengths (4·n) | formats (4·n) | types (4·n) | v0 NUL v1 NUL … ]
///
/// Text-format values must be NUL-terminated (libpq ignores `paramLengths` for them and reads to
/// the NUL), so every value is copied once with a terminator. The scratch space comes from
/// `withUnsafeTemporaryAllocation`, which uses the stack when it is small: a statement with a few
/// short parameters costs no heap allocation here. libpq copies everything into its output
/// buffer before the `PQsend…` call returns, so the buffer only has to live for `body`.
func withBindPointers<R>(
    _ binds: [PostgresBind],
    _ body: (UnsafePointer<PostgresOID>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
) -> R {
    let n = binds.count
    if n == 0 { return body(nil, nil, nil, nil) }
    var valueBytes = 0
    for b in binds { valueBytes += (b.bytes?.count ?? 0) + 1 }
    let pointerBytes = n * MemoryLayout<UnsafePointer<CChar>?>.stride
    let int32Bytes = n * MemoryLayout<Int32>.stride
    let total = pointerBytes + 3 * int32Bytes + valueBytes
    return withUnsafeTemporaryAllocation(byteCount: total, alignment: MemoryLayout<UnsafeRawPointer>.alignment) { raw in
        let base = raw.baseAddress!
        let values = base.bindMemory(to: UnsafePointer<CChar>?.self, capacity: n)
        let lengths = (base + pointerBytes).bindMemory(to: Int32.self, capacity: n)
        let formats = (base + pointerBytes + int32Bytes).bindMemory(to: Int32.self, capacity: n)
        let types = (base + pointerBytes + 2 * int32Bytes).bindMemory(to: PostgresOID.self, capacity: n)
        let text = (base + pointerBytes + 3 * int32Bytes).bindMemory(to: CChar.self, capacity: valueBytes)
        var offset = 0
        for (i, b) in binds.enumerated() {
            types[i] = b.type
            formats[i] = b.isBinary ? 1 : 0
            guard let bytes = b.bytes else {
                values[i] = nil
                lengths[i] = 0
                continue
            }
            bytes.withUnsafeBytes { src in
                if let s = src.baseAddress { UnsafeMutableRawPointer(text + offset).copyMemory(from: s, byteCount: src.count) }
            }
            text[offset + bytes.count] = 0
            values[i] = UnsafePointer(text + offset)
            lengths[i] = Int32(truncatingIfNeeded: bytes.count)  // ≤ maxBindBytes: checked by `start`
            offset += bytes.count + 1
        }
        return body(types, values, lengths, formats)
    }
}

/// PostgreSQL refuses any single field over 1 GB (`MaxAllocSize`); a larger bind could not even be
/// described to libpq (its lengths are `Int32`), so `start` fails such a statement before sending.
let maxBindBytes = (1 << 30) - 1

/// The protocol counts parameters in an Int16 (`Bind` message), and libpq refuses more than this.
let maxBindCount = 65_535

extension PostgresQuery {
    /// Why this statement cannot be sent as it is, or nil. Each answer is the error PostgreSQL
    /// itself reports for the same input (its SQLSTATE), so callers map one code whichever side
    /// noticed it, and none of them looks like a broken connection:
    /// - more than 65,535 parameters (54023, too_many_arguments);
    /// - a parameter over 1 GB (54000, program_limit_exceeded);
    /// - U+0000 in the SQL text or a text-format parameter (22021, character_not_in_repertoire):
    ///   libpq passes both as C strings and would silently cut them at the NUL, so `colB\0x`
    ///   would act on `colB`.
    var unsendableError: PostgresError? {
        if binds.count > maxBindCount {
            return .server(PostgresServerError(sqlState: "54023", message: "the statement has \(binds.count) parameters; PostgreSQL accepts at most \(maxBindCount)"))
        }
        if let nul = nulInSQLError(sql) { return nul }
        for (i, b) in binds.enumerated() {
            guard let bytes = b.bytes else { continue }
            if bytes.count > maxBindBytes {
                return .server(PostgresServerError(sqlState: "54000", message: "parameter $\(i + 1) is larger than 1 GB"))
            }
            if !b.isBinary, containsNUL(bytes) {
                return .server(PostgresServerError(sqlState: "22021", message: "parameter $\(i + 1) contains U+0000 (NUL), which PostgreSQL text cannot hold"))
            }
        }
        return nil
    }
}

/// The error for SQL text holding U+0000 (libpq would end the statement there), or nil.
private func nulInSQLError(_ sql: String) -> PostgresError? {
    sql.utf8.contains(0) ? .server(PostgresServerError(sqlState: "22021", message: "the statement text contains U+0000 (NUL)")) : nil
}

/// memchr speed: the scan runs over every text parameter of every statement.
private func containsNUL(_ bytes: [UInt8]) -> Bool {
    bytes.withUnsafeBytes { raw in
        guard let base = raw.baseAddress, raw.count > 0 else { return false }
        return memchr(base, 0, raw.count) != nil
    }
}

extension PostgresConnection.Request {
    /// The first reason any statement in the request cannot be sent, or nil.
    var unsendableError: PostgresError? {
        switch self {
        case .simple(let sql): return nulInSQLError(sql)
        case .statement(let q), .copyIn(let q, _), .copyInStream(let q, _), .copyOut(let q, _): return q.unsendableError
        case .pipeline(let qs): return qs.lazy.compactMap(\.unsendableError).first
        }
    }
}
