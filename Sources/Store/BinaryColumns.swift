// Columns of binary-format results (`PostgresQuery.binaryResults`), as PostgreSQL's type send
// functions write them (src/backend/utils/adt: int8send, byteasend, jsonb_send):
//
//   int8    ┌──────────────────────────────┐
//           │ 8 bytes, two's complement, BE │
//           └──────────────────────────────┘
//   bytea   ┌──────────────────────┐
//           │ the bytes themselves  │          (text format: "\x" + two hex digits per byte)
//           └──────────────────────┘
//   int4    4 bytes, two's complement, BE;  text: the UTF-8 bytes themselves
//   jsonb   ┌──────┬────────────────────────┐
//           │ 0x01 │ the JSON text (UTF-8)  │   (version 1, the only one PostgreSQL writes)
//           └──────┴────────────────────────┘
//
// The initial sync reads ~100 MB of states per 100k documents: in text format PostgreSQL writes
// them as 200 MB of hex and the server decodes it back; in binary format each state is one copy
// out of the result buffer.

import Postgres
import Values

enum BinaryColumns {
    /// A non-NULL int8 column.
    static func int64(_ row: PostgresRow, column: Int) throws(StoreError) -> Int64 {
        let n: Int64? = row.withRawValue(column) { raw in
            guard let raw, raw.count == 8, row.result.isBinary(column) else { return nil }
            var v: UInt64 = 0
            for b in raw { v = v << 8 | UInt64(b) }
            return Int64(bitPattern: v)
        }
        guard let n else { throw StoreError.corrupt("column \(column) is NULL or not a binary int8") }
        return n
    }

    /// A non-NULL int4 column.
    static func int32(_ row: PostgresRow, column: Int) throws(StoreError) -> Int32 {
        let n: Int32? = row.withRawValue(column) { raw in
            guard let raw, raw.count == 4, row.result.isBinary(column) else { return nil }
            var v: UInt32 = 0
            for b in raw { v = v << 8 | UInt32(b) }
            return Int32(bitPattern: v)
        }
        guard let n else { throw StoreError.corrupt("column \(column) is NULL or not a binary int4") }
        return n
    }

    /// A non-NULL boolean column (binary format: one byte, 0 or 1).
    static func bool(_ row: PostgresRow, column: Int) throws(StoreError) -> Bool {
        let b: Bool? = row.withRawValue(column) { raw in
            guard let raw, raw.count == 1, row.result.isBinary(column) else { return nil }
            return raw[raw.startIndex] != 0
        }
        guard let b else { throw StoreError.corrupt("column \(column) is NULL or not a binary bool") }
        return b
    }

    /// A non-NULL text column (binary format: the UTF-8 bytes themselves).
    static func text(_ row: PostgresRow, column: Int) throws(StoreError) -> String {
        let s: String? = row.withRawValue(column) { raw in
            guard let raw, row.result.isBinary(column) else { return nil }
            return String(decoding: raw, as: UTF8.self)
        }
        guard let s else { throw StoreError.corrupt("column \(column) is NULL or not a binary text") }
        return s
    }

    /// A non-NULL bytea column: its bytes.
    static func bytes(_ row: PostgresRow, column: Int) throws(StoreError) -> [UInt8] {
        let bytes: [UInt8]? = row.withRawValue(column) { raw in
            guard let raw, row.result.isBinary(column) else { return nil }
            return [UInt8](raw)
        }
        guard let bytes else { throw StoreError.corrupt("column \(column) is NULL or not a binary bytea") }
        return bytes
    }

    /// The size of a bytea column (0 for NULL), without copying it.
    static func byteCount(_ row: PostgresRow, column: Int) -> Int {
        row.withRawValue(column) { $0?.count ?? 0 }
    }

    /// A jsonb column (NULL reads as JSON null, as `DocumentStore.decodeJSON` does).
    static func json(_ row: PostgresRow, column: Int) throws(StoreError) -> Value {
        do {
            return try row.withRawValue(column) { raw throws -> Value in
                guard let raw else { return .null }
                guard row.result.isBinary(column), raw.count >= 1, raw[0] == 1 else {
                    throw StoreError.corrupt("column \(column) is not a version-1 binary jsonb")
                }
                do {
                    return try JSON.parse(UnsafeRawBufferPointer(rebasing: raw[1...]), limits: .stored)
                } catch {
                    throw StoreError.corrupt("invalid JSON in column \(column): \(error)")
                }
            }
        } catch {
            throw StoreError.from(error)
        }
    }
}
