import Postgres
import Values

/// A document's identity in a collection: the `_id` value (a string or an object), stored in the
/// `documents.id` jsonb column. jsonb equality ignores object key order, so `{"a":1,"b":2}` and
/// `{"b":2,"a":1}` name the same document.
struct DocumentKey: Hashable, Sendable {
    var collection: String
    var id: Value

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
