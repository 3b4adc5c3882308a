import Values

/// The 64-bit hash naming a document in `sub.have` and in the server's per-session set of held
/// documents (PROTOCOL.md §4.3): FNV-1a 64 over `UTF-8(collection) || 0x00 || deterministic CBOR(id)`.
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
        for b in CBORValueCodec.encode(id) { h = (h ^ UInt64(b)) &* prime }
        return h
    }
}
