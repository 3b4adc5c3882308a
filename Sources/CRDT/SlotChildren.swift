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
// document sizes allowed (5 MiB). `metas` may hold records no entry uses any more (and, rarely, equal
// records twice); it is rebuilt once it is more than twice as long as needed, so overwriting one field
// a million times stays bounded (amortized O(1) per write).

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
    /// Marks a register `prune` removes (no real index reaches this: `metas` is far shorter).
    private static let droppedIndex = UInt32.max
    private static let dropped = Stored.register(.null, meta: droppedIndex)

    /// A child as stored, for hot loops that handle plain registers without rebuilding a `Slot`.
    enum ChildView {
        /// A slot holding only a REGISTER with a value (no marker, counter, removal or children); its
        /// Meta may still be hidden by an ancestor's barrier, as for any slot.
        case register(Values.Value, Meta)
        case slot(Slot)
    }

    func forEachChild(_ body: (String, ChildView) throws -> Void) rethrows {
        for e in entries {
            switch e.stored {
            case .register(let v, let i): try body(e.key, .register(v, metas[Int(i)]))
            case .slot(let slot): try body(e.key, .slot(slot))
            }
        }
    }

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

    /// Drops the records no entry uses once `metas` outgrows twice what the entries need.
    private mutating func compactMetasIfNeeded() {
        guard metas.count > 2 * entries.count + 8 else { return }
        var kept = ContiguousArray<Meta>()
        var remap = [UInt32](repeating: .max, count: metas.count)  // old index -> new index
        for i in entries.indices {
            guard case .register(let v, let old) = entries[i].stored else { continue }
            if remap[Int(old)] == .max {
                remap[Int(old)] = UInt32(kept.count)
                kept.append(metas[Int(old)])
            }
            entries[i].stored = .register(v, meta: remap[Int(old)])
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
        // Bytes, not `==`: the order is bytewise, and canonically equivalent keys are different fields.
        return (lo < entries.count && entries[lo].key.utf8Equals(key), lo)
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

    /// In-place access, inserting `defaultValue` first if `key` is absent; a child left empty by the
    /// mutation is removed (an empty slot is never stored).
    subscript(key: String, default defaultValue: @autoclosure () -> Slot) -> Slot {
        get { self[key] ?? defaultValue() }
        _modify {
            let (found, i) = search(key)
            var s = found ? slot(entries[i].stored) : defaultValue()
            if found { entries[i].stored = Self.placeholder }
            defer {
                switch (found, s.isEmpty) {
                case (true, true): entries.remove(at: i)
                case (true, false): entries[i].stored = store(s)
                case (false, true): break
                case (false, false): entries.insert(Entry(key: key, stored: store(s)), at: i)
                }
                compactMetasIfNeeded()
            }
            yield &s
        }
    }

    /// Appends a child whose key sorts after every key present (the decoder, which has checked the
    /// canonical order already): no search.
    mutating func append(sortedKey key: String, _ slot: Slot) {
        assert(entries.last.map { CBORKeyOrder.less($0.key, key) } ?? true, "keys must arrive in canonical order")
        entries.append(Entry(key: key, stored: store(slot)))
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

    /// `updateEach` for pruning passes: plain registers are only shown their Meta and are removed
    /// when `keepRegister` is false; every other child goes through `body`. Then empty children are removed.
    mutating func prune(keepRegister: (Meta) -> Bool, _ body: (inout Slot) -> Void) {
        var sawEmpty = false
        for i in entries.indices {
            switch entries[i].stored {
            case .register(_, let m):
                if !keepRegister(metas[Int(m)]) {
                    entries[i].stored = Self.dropped
                    sawEmpty = true
                }
            case .slot(var s):
                entries[i].stored = Self.placeholder
                body(&s)
                if s.isEmpty { sawEmpty = true }
                entries[i].stored = store(s)
            }
        }
        if sawEmpty {
            entries.removeAll {
                switch $0.stored {
                case .slot(let s): s.isEmpty
                case .register(_, let m): m == Self.droppedIndex
                }
            }
        }
        compactMetasIfNeeded()
    }

    /// Removes the children for which `shouldRemove` is true.
    mutating func removeAll(where shouldRemove: (Slot) -> Bool) {
        let kept = entries.filter { !shouldRemove(slot($0.stored)) }
        entries = ContiguousArray(kept)
        compactMetasIfNeeded()
    }

    /// For tests and measurements: how many event records are held, and how many children are
    /// stored in the compact register form.
    var metaRecordCount: Int { metas.count }
    var compactRegisterCount: Int { entries.count { if case .register = $0.stored { true } else { false } } }

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
