import CRDT
import Postgres
import Values

// Documents created in bulk go to PostgreSQL with `COPY documents (collection, id, value, state)
// FROM STDIN (FORMAT binary)` instead of `INSERT … SELECT FROM unnest(…)`: no array to build and
// take apart per chunk, and COPY inserts heap tuples in batches (one WAL record per page rather
// than per row). The unique index still checks every row, so a concurrent creator of the same
// `_id` fails the COPY with 23505 on documents_pkey exactly as it failed the plain INSERT
// (docs/STORAGE.md "Creating documents concurrently").
//
// Tuple layout (framing: `PostgresBinaryCopy`):
//
//   field count 4 | collection text (UTF-8) | id jsonb (version byte 1 | JSON text)
//                 | value jsonb (version byte 1 | JSON text) | state bytea (canonical CBOR, docs/CRDT.md)
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

    /// One tuple for a live document; nil for a tombstone (no value: it takes the INSERT path).
    static func tuple(collection: String, id: Value, document: Document) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(2048)
        return append(collection: collection, id: id, document: document, to: &out) ? out : nil
    }

    /// Appends a live document's tuple to a payload being built; false (nothing appended) for a
    /// tombstone. (No `reserveCapacity` here: growing an array by repeated exact reservations
    /// copies it every time; it grows geometrically on its own.)
    static func append(collection: String, id: Value, document: Document, to out: inout [UInt8]) -> Bool {
        guard let value = document.materialize() else { return false }
        let state = document.encode()
        PostgresBinaryCopy.appendTuple(fields: 4, to: &out)
        PostgresBinaryCopy.appendField(collection.utf8, to: &out)
        appendJSONB(id, to: &out)
        appendJSONB(value, to: &out)
        PostgresBinaryCopy.appendField(state, to: &out)
        return true
    }

    /// The whole payload for some tuples.
    static func payload(_ tuples: [[UInt8]]) -> [UInt8] {
        var out = PostgresBinaryCopy.header
        out.reserveCapacity(tuples.reduce(out.count + PostgresBinaryCopy.trailer.count) { $0 + $1.count })
        for t in tuples { out.append(contentsOf: t) }
        out.append(contentsOf: PostgresBinaryCopy.trailer)
        return out
    }

    /// A jsonb field: the format version (1), then the JSON text, written in place.
    static func appendJSONB(_ value: Value, to out: inout [UInt8]) {
        PostgresBinaryCopy.appendField(to: &out) { out in
            out.append(1)
            JSONWriter.write(value, into: &out)
        }
    }
}
