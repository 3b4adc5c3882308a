import Postgres
import Values

// A large transaction's change log goes to PostgreSQL with `COPY change_log … FROM STDIN (FORMAT
// binary)` while the transaction holds the counter row (docs/STORAGE.md "Transaction numbers and
// the change log"): the rows are encoded before the lock is taken, with a placeholder where the
// transaction number goes, and the number is written into them once the counter's UPDATE has
// returned it. Framing: `PostgresBinaryCopy`; each tuple here:
//
//   field count int16 = 7
//   txn        int8   length 8  | big-endian value   <- patched at `txnOffsets`
//   seq        int4   length 4  | big-endian value
//   collection text   length    | UTF-8
//   id         jsonb  length    | version byte 1 | JSON text
//   kind       text   length    | UTF-8
//   delta      bytea  length    | bytes            (-1: NULL)
//   origin     int8   length 8  | big-endian value (-1: NULL)
//
// `created_at` takes its default (now()).
struct ChangeLogCopy {
    static let statement = "COPY change_log (txn, seq, collection, id, kind, delta, origin) FROM STDIN (FORMAT binary)"
    /// Bytes per COPY statement: a piece is one round trip, and bounds what is encoded at once.
    static let pieceBytes = 4 << 20

    /// The payload, framed (header and trailer included).
    private(set) var payload: [UInt8] = PostgresBinaryCopy.header
    /// Where each tuple's txn value starts.
    private(set) var txnOffsets: [Int] = []
    /// The first change after this piece.
    private(set) var end: Int

    /// Changes from `start` on, until `pieceBytes` is reached (at least one).
    init(_ changes: [WriteTransaction.ChangeRecord], from start: Int) {
        end = start
        while end < changes.count && (end == start || payload.count < Self.pieceBytes) {
            append(changes[end], seq: Int32(truncatingIfNeeded: end))
            end += 1
        }
        payload.append(contentsOf: PostgresBinaryCopy.trailer)
    }

    private mutating func append(_ c: WriteTransaction.ChangeRecord, seq: Int32) {
        PostgresBinaryCopy.appendTuple(fields: 7, to: &payload)
        txnOffsets.append(PostgresBinaryCopy.appendInt64Field(0, to: &payload))
        PostgresBinaryCopy.appendInt32Field(seq, to: &payload)
        PostgresBinaryCopy.appendField(c.key.collection.utf8, to: &payload)
        DocumentCopy.appendJSONB(c.key.id, to: &payload)
        PostgresBinaryCopy.appendField(c.kind.utf8, to: &payload)
        if let delta = c.delta { PostgresBinaryCopy.appendField(delta, to: &payload) } else { PostgresBinaryCopy.appendNull(to: &payload) }
        if let origin = c.origin { PostgresBinaryCopy.appendInt64Field(origin, to: &payload) } else { PostgresBinaryCopy.appendNull(to: &payload) }
    }

    /// Writes the transaction number into every tuple.
    mutating func setTransaction(_ txn: Int64) {
        for offset in txnOffsets { PostgresBinaryCopy.patchInt64(txn, at: offset, in: &payload) }
    }
}

extension WriteTransaction {
    /// `finish` for more than `changeLogChunk` changes: the counter's UPDATE (with every held
    /// write before it) in one round trip, then the change log by COPY stamped with the number it
    /// returned, then the notification and COMMIT in one pipeline. The pieces encoded before the
    /// UPDATE (up to `prebuiltChangeLogBytes`, so a huge statement does not hold its change log
    /// twice in memory) keep encoding out of the time the counter row — which serializes the
    /// commits of every instance — is locked; the row stays locked from the UPDATE to the end of
    /// COMMIT, exactly as with the single-statement form.
    mutating func finishByCopy() async throws -> Int64 {
        var prebuilt: [ChangeLogCopy] = []
        var prebuiltBytes = 0
        var next = 0
        while next < changes.count && prebuiltBytes < Self.prebuiltChangeLogBytes {
            let piece = ChangeLogCopy(changes, from: next)
            prebuiltBytes += piece.payload.count
            next = piece.end
            prebuilt.append(piece)
        }
        var counter: PostgresQuery = "UPDATE bigpeer_txn SET n = n + 1 RETURNING n"
        counter.prepared = true
        guard let row = try await db.query(counter).first else { throw StoreError.corrupt("bigpeer_txn has no row") }
        let txn = try row.decode(0, as: Int64.self)
        let copy = PostgresQuery(unsafeSQL: ChangeLogCopy.statement)
        for var piece in prebuilt {
            piece.setTransaction(txn)
            try await db.copyIn(copy, data: piece.payload)
        }
        prebuilt = []
        while next < changes.count {
            var piece = ChangeLogCopy(changes, from: next)
            next = piece.end
            piece.setTransaction(txn)
            try await db.copyIn(copy, data: piece.payload)
        }
        var notify: PostgresQuery = "SELECT n, pg_notify('bigpeer_changes', n::text) FROM bigpeer_txn"
        notify.prepared = true
        try await db.commit(after: notify)  // the row lock kept the number: it is still `txn`
        return txn
    }
}
