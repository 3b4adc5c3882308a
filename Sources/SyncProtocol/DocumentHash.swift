import Values

/// The 64-bit hash naming a document in `sub.have` and in the server's per-session set of held
/// documents (PROTOCOL.md §4.3): FNV-1a 64 over `UTF-8(collection) || 0x00 || deterministic CBOR(id)`.
///
/// The id is hashed in its jsonb key form (`Value.jsonbIdentity`: a whole-valued double as its
/// integer): `{k: 1}` and `{k: 1.0}` are one row in PostgreSQL and one document in a small peer's
/// store (`DocumentIdentity`), so they are one hash. A peer that created the document as
/// `{k: 1.0}` and a server that holds it as `{k: 1}` then agree on what the peer holds.
///
/// FNV-1a is not collision-resistant against an adversary, and need not be: a collision only makes
/// the server believe a peer holds a document it does not (it then sends a delta the peer answers
/// with `want`) or not hold one it does (it sends the full state). Neither loses data.
public enum DocumentHash {
    static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    static let prime: UInt64 = 0x0000_0100_0000_01b3

    public static func of(_ ref: DocumentRef) -> UInt64 { of(collection: ref.collection, id: ref.id) }

    public static func of(collection: String, id: Value) -> UInt64 {
        var h = offsetBasis
        for b in collection.utf8 { h = (h ^ UInt64(b)) &* prime }
        h = (h ^ 0) &* prime
        let key: Value = if case .string = id { id } else { id.jsonbIdentity }
        for b in CBORValueCodec.encode(key) { h = (h ^ UInt64(b)) &* prime }
        return h
    }
}
