import Postgres
import Values

/// A document's identity in a collection: the `_id` value (a string or an object), stored in the
/// `documents.id` jsonb column. jsonb equality ignores object key order, so `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` name the same document.
///
/// Equality is byte-exact (Values/ExactText.swift), as PostgreSQL's: the read cache must never
/// answer for "\u{212A}ate" with a document of "Kate", nor for an NFD `_id` with the NFC one.
/// (`Value`'s own equality is already byte-exact.) Numbers are where the two differ: jsonb finds
/// `{k: 1}` for `{k: 1.0}`, `==` does not, so rows read under lock are filed under the form asked
/// (`WriteTransaction.lockDocuments`, `Value.jsonbIdentity`).
struct DocumentKey: Hashable, Sendable {
    var collection: String
    var id: Value

    static func == (a: DocumentKey, b: DocumentKey) -> Bool { a.collection.utf8Equals(b.collection) && a.id == b.id }
    func hash(into hasher: inout Hasher) {
        hasher.combine(collection)  // byte-equal names hash alike
        hasher.combine(id)
    }

    /// The id as the jsonb parameter text.
    var idJSON: PostgresJSON { PostgresJSON(JSON.string(id)) }

    /// A fresh random 128-bit id, as 32 lowercase hex digits.
    static func generateID() -> Value {
        var rng = SystemRandomNumberGenerator()
        let hi = rng.next() as UInt64, lo = rng.next() as UInt64
        func hex(_ v: UInt64) -> String {
            let s = String(v, radix: 16)
            return String(repeating: "0", count: 16 - s.count) + s
        }
        return .string(hex(hi) + hex(lo))
    }
}

/// The ids a read asked for, by the document jsonb finds for each: a row comes back with the id
/// it was created with, which may be another number form of one asked (`{k: 1}` for `{k: 1.0}`;
/// `Value.jsonbIdentity`), and is handed to the caller under the forms it asked.
struct AskedIDs {
    private let only: Value?
    private let byIdentity: [Value: [Value]]

    init<C: Collection<Value>>(_ ids: C) {
        // One id asked (a point write): any row returned is its document; nothing to group.
        only = ids.count == 1 ? ids.first : nil
        byIdentity = only == nil ? Dictionary(grouping: Set(ids), by: \.jsonbIdentity) : [:]
    }

    /// The asked forms of the row whose id is `rowID` (itself if it was not asked).
    func forms(of rowID: Value) -> [Value] {
        if let only { return [only] }
        return byIdentity[rowID.jsonbIdentity] ?? [rowID]
    }
}

