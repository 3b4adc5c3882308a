// The entries of a MAP slot.
//
// Two parallel arrays kept sorted in RFC 8949 §4.2.1 key order (shorter UTF-8 first, then bytewise),
// instead of a Dictionary: no hash-table slack per document (memory is the constraint for many small
// documents), encoding walks entries in canonical order without sorting, lookups are binary searches.
// Inserting a new key in a MAP of n keys costs O(n) moves, which stays far below the cost of the
// operation around it for the document sizes allowed (5 MiB).

import Values

struct SlotChildren: Hashable, Sendable, RandomAccessCollection, ExpressibleByDictionaryLiteral {
    typealias Element = (key: String, value: Slot)

    private(set) var keys: ContiguousArray<String> = []
    private(set) var values: ContiguousArray<Slot> = []

    init() {}
    init(dictionaryLiteral elements: (String, Slot)...) {
        for (k, v) in elements { self[k] = v }
    }

    var startIndex: Int { 0 }
    var endIndex: Int { keys.count }
    subscript(position: Int) -> Element { (keys[position], values[position]) }

    /// Binary search: where `key` is, or where it would be inserted.
    private func search(_ key: String) -> (found: Bool, index: Int) {
        var lo = 0, hi = keys.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if CBORKeyOrder.less(keys[mid], key) {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        return (lo < keys.count && keys[lo] == key, lo)
    }

    subscript(key: String) -> Slot? {
        get {
            let (found, i) = search(key)
            return found ? values[i] : nil
        }
        set {
            let (found, i) = search(key)
            switch (found, newValue) {
            case (true, let v?): values[i] = v
            case (true, nil):
                keys.remove(at: i)
                values.remove(at: i)
            case (false, let v?):
                keys.insert(key, at: i)
                values.insert(v, at: i)
            case (false, nil): break
            }
        }
    }

    /// In-place access, inserting `defaultValue` first if `key` is absent.
    subscript(key: String, default defaultValue: @autoclosure () -> Slot) -> Slot {
        get { self[key] ?? defaultValue() }
        _modify {
            let (found, i) = search(key)
            if !found {
                keys.insert(key, at: i)
                values.insert(defaultValue(), at: i)
            }
            yield &values[i]
        }
    }

    mutating func reserveCapacity(_ n: Int) {
        keys.reserveCapacity(n)
        values.reserveCapacity(n)
    }

    /// Mutates every child in place.
    mutating func updateEach(_ body: (inout Slot) -> Void) {
        for i in values.indices { body(&values[i]) }
    }

    /// Removes the children for which `shouldRemove` is true.
    mutating func removeAll(where shouldRemove: (Slot) -> Bool) {
        var keptKeys = ContiguousArray<String>(), keptValues = ContiguousArray<Slot>()
        for i in values.indices where !shouldRemove(values[i]) {
            keptKeys.append(keys[i])
            keptValues.append(values[i])
        }
        keys = keptKeys
        values = keptValues
    }
}
