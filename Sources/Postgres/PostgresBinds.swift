import CLibPQ

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

extension PostgresQuery {
    /// The error for a bind larger than `maxBindBytes` (SQLSTATE 54000, program_limit_exceeded,
    /// what the server itself reports), or nil.
    var oversizedBindError: PostgresError? {
        for (i, b) in binds.enumerated() where (b.bytes?.count ?? 0) > maxBindBytes {
            return .server(PostgresServerError(sqlState: "54000", message: "parameter $\(i + 1) is larger than 1 GB"))
        }
        return nil
    }
}

extension PostgresConnection.Request {
    /// The first oversized bind's error of any statement in the request, or nil.
    var oversizedBindError: PostgresError? {
        switch self {
        case .simple: return nil
        case .statement(let q), .copyIn(let q, _), .copyInStream(let q, _), .copyOut(let q, _): return q.oversizedBindError
        case .pipeline(let qs): return qs.lazy.compactMap(\.oversizedBindError).first
        }
    }
}
