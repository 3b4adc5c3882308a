// Leftmost occurrence of a needle in a haystack in O(haystack + needle) comparisons
// (Knuth–Morris–Pratt), for LIKE segments, `contains` and `replace`: a naive search is
// O(haystack × needle), which a 4,000-scalar pattern over an 8 MB argument turned into 29 s.

enum SubstringSearch {
    /// The KMP failure table: for each prefix of `needle`, the length of its longest proper border.
    @_specialize(where T == UInt8)
    @_specialize(where T == Unicode.Scalar)
    static func failureTable<T: Equatable>(_ p: [T]) -> [Int] {
        var table = [Int](repeating: 0, count: p.count)
        var k = 0
        var i = 1
        while i < p.count {
            while k > 0 && p[i] != p[k] { k = table[k - 1] }
            if p[i] == p[k] { k += 1 }
            table[i] = k
            i += 1
        }
        return table
    }

    /// The first index in `haystack` at which `needle` starts, or nil. `table` is `failureTable(needle)`.
    /// Charges `budget` about one step per comparison.
    @_specialize(where T == UInt8, H == ArraySlice<UInt8>)
    @_specialize(where T == Unicode.Scalar, H == ArraySlice<Unicode.Scalar>)
    @_specialize(where T == UInt8, H == Slice<UnsafeBufferPointer<UInt8>>)
    static func firstIndex<T: Equatable, H: RandomAccessCollection<T>>(of needle: [T], table: [Int], in haystack: H,
                                                                       budget: EvaluationBudget? = nil) throws(DQLEvaluationError) -> Int?
    where H.Index == Int {
        guard !needle.isEmpty else { return haystack.startIndex }
        var k = 0
        var steps = 0
        var i = haystack.startIndex
        while i < haystack.endIndex {
            let c = haystack[i]
            while k > 0 && c != needle[k] { k = table[k - 1]; steps += 1 }
            if c == needle[k] { k += 1 }
            if k == needle.count { try budget?.charge(steps); return i - needle.count + 1 }
            i += 1
            steps += 1
            if steps >= 4096 { try budget?.charge(steps); steps = 0 }
        }
        try budget?.charge(steps)
        return nil
    }

    /// Start indices of the non-overlapping occurrences of `needle` in `haystack`, left to right.
    @_specialize(where T == UInt8)
    static func occurrences<T: Equatable>(of needle: [T], in haystack: [T], budget: EvaluationBudget? = nil) throws(DQLEvaluationError) -> [Int] {
        guard !needle.isEmpty else { return [] }
        let table = failureTable(needle)
        var found: [Int] = []
        var from = 0
        while from <= haystack.count - needle.count,
              let at = try firstIndex(of: needle, table: table, in: haystack[from...], budget: budget) {
            found.append(at)
            from = at + needle.count
        }
        return found
    }
}
