/// Token buckets by key, at most `capacity` of them. A key seen for the first time takes a free
/// slot or, once all are used, the slot of the oldest key (first in, first out: a ring hand), so an
/// attacker cycling addresses or ids cannot grow it, and every operation is one dictionary probe.
///
/// An evicted key starts again with a full bucket. That errs towards allowing: a client whose
/// bucket was pushed out gets its burst back. For failed-authentication counts it gains an
/// attacker nothing: pushing its own entry out takes `capacity` failures from other keys of the
/// same table, each of which had its own allowance anyway.
struct BoundedBucketTable<Key: Hashable & Sendable>: Sendable {
    private var index: [Key: Int] = [:]
    private var slots: [(key: Key, bucket: TokenBucket)] = []
    private var hand = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { slots.count }

    func bucket(_ key: Key) -> TokenBucket? { index[key].map { slots[$0].bucket } }

    /// Runs `body` on `key`'s bucket, making a fresh one (`fresh`) if the key has none.
    mutating func withBucket<R>(_ key: Key, fresh: () -> TokenBucket, _ body: (inout TokenBucket) -> R) -> R {
        if let i = index[key] { return body(&slots[i].bucket) }
        var bucket = fresh()
        let result = body(&bucket)
        if slots.count < capacity {
            index[key] = slots.count
            slots.append((key, bucket))
        } else {
            index[slots[hand].key] = nil
            slots[hand] = (key, bucket)
            index[key] = hand
            hand = (hand + 1) % capacity
        }
        return result
    }

    /// Runs `body` on `key`'s bucket if it has one (nothing is made for a key never seen).
    mutating func withExistingBucket<R>(_ key: Key, _ body: (inout TokenBucket) -> R) -> R? {
        guard let i = index[key] else { return nil }
        return body(&slots[i].bucket)
    }
}
