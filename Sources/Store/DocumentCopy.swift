import CRDT
import Values

// Documents created in bulk go to PostgreSQL with `COPY documents (collection, id, value, state)
// FROM STDIN (FORMAT binary)` instead of `INSERT … SELECT FROM unnest(…)`: no array to build and
// take apart per chunk, and COPY inserts heap tuples in batches (one WAL record per page rather
// than per row). The unique index still checks every row, so a concurrent creator of the same
// `_id` fails the COPY with 23505 on documents_pkey exactly as it failed the plain INSERT
// (docs/STORAGE.md "Creating documents concurrently").
//
// Binary COPY payload (PostgreSQL docs, "COPY", "Binary Format"; integers big-endian):
//
//   header   "PGCOPY\n\xFF\r\n\0"  flags int32 = 0  extension length int32 = 0
//   tuple    field count int16 = 4
//            per field: length int32 (-1 = NULL) | bytes
//              collection  text   UTF-8
//              id          jsonb  version byte 1 | JSON text
//              value       jsonb  version byte 1 | JSON text
//              state       bytea  raw bytes (canonical CBOR, docs/CRDT.md)
//   trailer  int16 = -1
//
// `deleted` (false), `deleted_at` (NULL) and `updated_at` (now(): the transaction's start, as the
// INSERT wrote) take their column defaults, so only live documents are copied; a creation that is
// already a tombstone takes the INSERT path.
enum DocumentCopy {
    /// The statement the payload belongs to.
    static let statement = "COPY documents (collection, id, value, state) FROM STDIN (FORMAT binary)"

    /// Creations per statement below which the plain INSERT is used: COPY cannot ride in a
    /// pipeline with other statements, so it costs a round trip of its own (a one-document INSERT
    /// keeps its three round trips).
    static let minimumRows = 64

    static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]
    static let trailer: [UInt8] = [0xFF, 0xFF]

    /// One tuple for a live document; nil for a tombstone (no value: it takes the INSERT path).
    static func tuple(collection: String, id: Value, document: Document) -> [UInt8]? {
        guard let value = document.materialize() else { return nil }
        let state = document.encode()
        var out: [UInt8] = []
        out.reserveCapacity(state.count * 2 + collection.utf8.count + 64)
        appendInt16(4, to: &out)
        appendInt32(Int32(truncatingIfNeeded: collection.utf8.count), to: &out)
        out.append(contentsOf: collection.utf8)
        appendJSONB(id, to: &out)
        appendJSONB(value, to: &out)
        appendInt32(Int32(truncatingIfNeeded: state.count), to: &out)
        out.append(contentsOf: state)
        return out
    }

    /// The whole payload for some tuples.
    static func payload(_ tuples: [[UInt8]]) -> [UInt8] {
        var out = header
        out.reserveCapacity(tuples.reduce(header.count + trailer.count) { $0 + $1.count })
        for t in tuples { out.append(contentsOf: t) }
        out.append(contentsOf: trailer)
        return out
    }

    /// A jsonb field: its length, the format version (1), then the JSON text, written in place
    /// (the length is patched once the text is known).
    static func appendJSONB(_ value: Value, to out: inout [UInt8]) {
        let lengthAt = out.count
        appendInt32(0, to: &out)
        out.append(1)
        JSONWriter.write(value, into: &out)
        let n = UInt32(truncatingIfNeeded: out.count - lengthAt - 4)
        out[lengthAt] = UInt8(truncatingIfNeeded: n >> 24)
        out[lengthAt + 1] = UInt8(truncatingIfNeeded: n >> 16)
        out[lengthAt + 2] = UInt8(truncatingIfNeeded: n >> 8)
        out[lengthAt + 3] = UInt8(truncatingIfNeeded: n)
    }

    static func appendInt32(_ v: Int32, to out: inout [UInt8]) {
        let u = UInt32(bitPattern: v)
        out.append(UInt8(truncatingIfNeeded: u >> 24))
        out.append(UInt8(truncatingIfNeeded: u >> 16))
        out.append(UInt8(truncatingIfNeeded: u >> 8))
        out.append(UInt8(truncatingIfNeeded: u))
    }

    static func appendInt16(_ v: Int16, to out: inout [UInt8]) {
        let u = UInt16(bitPattern: v)
        out.append(UInt8(truncatingIfNeeded: u >> 8))
        out.append(UInt8(truncatingIfNeeded: u))
    }
}
