// The entries of a MAP slot, stored compactly (memory per document is the constraint when a server
// holds many small documents; docs/CRDT.md "In-memory representation").
//
//   entries  [ Entry ]  sorted in RFC 8949 §4.2.1 key order (shorter UTF-8 first, then bytewise):
//                       no hash-table slack, encoding walks them in canonical order without sorting,
//                       lookups are binary searches
//   Entry    key: String (16 B) + Stored (24 B)
//   Stored   .register(value, metaIndex)   a plain REGISTER field (the common case): the value and a
//                                          4-byte index into `metas`, in the 24 bytes a bare `Value`
//                                          takes, no heap allocation of its own
//          | .slot(Slot)                   anything else (MAP, COUNTER, ATTACHMENT, a pruned register,
//                                          removals), boxed
//   metas    [ Meta ]   the distinct event records the registers refer to: every field of one write
//                       shares its Meta, so a document inserted by one upsert holds one 24-byte record
//                       instead of one per field
//
// Callers see whole `Slot` values: reads rebuild the slot from its stored form, writes store it back,
// so the merge, delta and materialize code never deals with the compact form. Inserting a new key in a
// MAP of n keys costs O(n) moves, which stays far below the cost of the operation around it for the
// document sizes allowed (5 MiB). `metas` may hold duplicates and records no entry uses any more; it
// is rebuilt once it is more than twice as long as needed, so overwriting one field a million times
// stays bounded (amortized O(1) per write).

import Values

struct SlotChildren: Sendable, Hashable, RandomAccessCollection, ExpressibleByDictionaryLiteral {
    typealias Element = (key: String, value: Slot)
    typealias Key = String
    typealias Value = Slot

    private enum Stored: Sendable {
        case register(Values.Value, meta: UInt32)
        indirect case slot(Slot)
    }

    private struct Entry: Sendable {
        var key: String
        var stored: Stored
    }

    private var entries: ContiguousArray<Entry> = []
    private var metas: ContiguousArray<Meta> = []

    init() {}
    init(dictionaryLiteral elements: (String, Slot)...) {
        for (k, v) in elements { self[k] = v }
    }

    var startIndex: Int { 0 }
    var endIndex: Int { entries.count }
    subscript(position: Int) -> Element { (entries[position].key, slot(entries[position].stored)) }

    var keys: [String] { entries.map(\.key) }
    var values: LazyMapCollection<SlotChildren, Slot> { lazy.map(\.value) }

    /// Stands in for an entry while its slot is being mutated outside the array (no allocation,
    /// never read): the stored box is released so the slot being mutated is uniquely referenced.
    private static let placeholder = Stored.register(.null, meta: 0)

    // MARK: stored form

    private func slot(_ s: Stored) -> Slot {
        switch s {
        case .register(let v, let i):
            var slot = Slot()
            slot.register = Register(meta: metas[Int(i)], payload: .value(v))
            return slot
        case .slot(let slot):
            return slot
        }
    }

    private mutating func store(_ slot: Slot) -> Stored {
        guard slot.children.isEmpty, !slot.hasExtras, let r = slot.register,
              case .value(let v)? = r.payload else { return .slot(slot) }
        return .register(v, meta: metaIndex(r.meta))
    }

    /// The index of `m` in `metas`, appending it unless one of the last few records is equal
    /// (fields of one write are stored one after another, so this finds the shared record).
    private mutating func metaIndex(_ m: Meta) -> UInt32 {
        let n = metas.count
        for i in stride(from: n - 1, through: Swift.max(0, n - 4), by: -1) where metas[i] == m { return UInt32(i) }
        metas.append(m)
        return UInt32(n)
    }

    /// Drops unused and duplicate records once `metas` outgrows twice what the entries need.
    private mutating func compactMetasIfNeeded() {
        guard metas.count > 2 * entries.count + 8 else { return }
        var kept = ContiguousArray<Meta>()
        var index: [Meta: UInt32] = [:]
        for i in entries.indices {
            guard case .register(let v, let old) = entries[i].stored else { continue }
            let m = metas[Int(old)]
            let new: UInt32
            if let j = index[m] {
                new = j
            } else {
                new = UInt32(kept.count)
                index[m] = new
                kept.append(m)
            }
            entries[i].stored = .register(v, meta: new)
        }
        metas = kept
    }

    // MARK: access

    /// Binary search: where `key` is, or where it would be inserted.
    private func search(_ key: String) -> (found: Bool, index: Int) {
        var lo = 0, hi = entries.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if CBORKeyOrder.less(entries[mid].key, key) {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        return (lo < entries.count && entries[lo].key == key, lo)
    }

    subscript(key: String) -> Slot? {
        get {
            let (found, i) = search(key)
            return found ? slot(entries[i].stored) : nil
        }
        set {
            let (found, i) = search(key)
            switch (found, newValue) {
            case (true, let v?): entries[i].stored = store(v)
            case (true, nil): entries.remove(at: i)
            case (false, let v?): entries.insert(Entry(key: key, stored: store(v)), at: i)
            case (false, nil): return
            }
            compactMetasIfNeeded()
        }
    }

    /// In-place access, inserting `defaultValue` first if `key` is absent.
    subscript(key: String, default defaultValue: @autoclosure () -> Slot) -> Slot {
        get { self[key] ?? defaultValue() }
        _modify {
            let (found, i) = search(key)
            var s = found ? slot(entries[i].stored) : defaultValue()
            if found { entries[i].stored = Self.placeholder }
            defer {
                let stored = store(s)
                if found { entries[i].stored = stored } else { entries.insert(Entry(key: key, stored: stored), at: i) }
                compactMetasIfNeeded()
            }
            yield &s
        }
    }

    mutating func reserveCapacity(_ n: Int) {
        entries.reserveCapacity(n)
    }

    /// Mutates every child in place.
    mutating func updateEach(_ body: (inout Slot) -> Void) {
        for i in entries.indices {
            var s = slot(entries[i].stored)
            entries[i].stored = Self.placeholder
            body(&s)
            entries[i].stored = store(s)
        }
        compactMetasIfNeeded()
    }

    /// Removes the children for which `shouldRemove` is true.
    mutating func removeAll(where shouldRemove: (Slot) -> Bool) {
        let kept = entries.filter { !shouldRemove(slot($0.stored)) }
        entries = ContiguousArray(kept)
        compactMetasIfNeeded()
    }

    // MARK: equality by content (the stored form is not canonical: `metas` may hold spare records)

    static func == (a: SlotChildren, b: SlotChildren) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    func hash(into h: inout Hasher) {
        h.combine(count)
        for (key, slot) in self {
            h.combine(key)
            h.combine(slot)
        }
    }
}
