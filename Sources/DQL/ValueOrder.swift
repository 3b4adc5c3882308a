// How DQL compares values: equality, the ordering operators and the total order of ORDER BY.
//
// Total order (ORDER BY, MIN/MAX, DISTINCT and GROUP BY keys):
//   MISSING < NULL < false < true < numbers < strings < arrays < objects
// - Numbers compare by the value of their JSON text: integers exactly, doubles by the shortest
//   decimal that reads back to the same double (what the serializer writes, and what PostgreSQL's
//   JSONB stores). Below 2^53 in magnitude this is the exact mathematical comparison; beyond it an
//   integer is compared with the double's printed decimal, so the in-memory result always agrees
//   with PostgreSQL's numeric comparison of the stored JSONB (pushdown never changes a result).
// - Strings compare by Unicode code points (the byte order of their UTF-8), never by locale,
//   matching PostgreSQL's `COLLATE "C"`.
// - Arrays compare element by element, then by length; objects by their (key, value) pairs in
//   key order, then by size.

import Values

enum DQLOrder {
    /// Rank of a value's type in the total order; MISSING is 0.
    @inline(__always) static func rank(_ v: Value?) -> Int {
        guard let v else { return 0 }
        switch v {
        case .null: return 1
        case .bool(let b): return b ? 3 : 2
        case .int, .double: return 4
        case .string: return 5
        case .array: return 6
        case .object: return 7
        }
    }

    /// The type class that equality and the ordering operators work within (false and true share one).
    @inline(__always) static func typeClass(_ v: Value) -> Int {
        switch v {
        case .null: 1
        case .bool: 2
        case .int, .double: 4
        case .string: 5
        case .array: 6
        case .object: 7
        }
    }

    /// Total order: negative, zero or positive.
    static func compare(_ a: Value?, _ b: Value?) -> Int {
        let ra = rank(a), rb = rank(b)
        if ra != rb { return ra < rb ? -1 : 1 }
        guard let a, let b else { return 0 }
        switch (a, b) {
        case (.string(let x), .string(let y)): return compareStrings(x, y)
        case (.array(let x), .array(let y)):
            for (p, q) in zip(x, y) {
                let c = compare(p, q)
                if c != 0 { return c }
            }
            return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
        case (.object(let x), .object(let y)):
            let kx = JSONWriter.sortedKeys(x), ky = JSONWriter.sortedKeys(y)
            for (p, q) in zip(kx, ky) {
                let c = compareStrings(p, q)
                if c != 0 { return c }
                let v = compare(x[p], y[q])
                if v != 0 { return v }
            }
            return kx.count == ky.count ? 0 : (kx.count < ky.count ? -1 : 1)
        default:
            return compareNumbers(a, b) ?? 0
        }
    }

    static func compareStrings(_ x: String, _ y: String) -> Int {
        var i = x.utf8.makeIterator(), j = y.utf8.makeIterator()
        while true {
            switch (i.next(), j.next()) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let p?, let q?): if p != q { return p < q ? -1 : 1 }
            }
        }
    }

    /// Compares two numbers (nil when either is not a number). NaN, which no JSON or DQL literal
    /// can produce, sorts above every other number so the order stays total.
    static func compareNumbers(_ a: Value, _ b: Value) -> Int? {
        switch (a, b) {
        case (.int(let x), .int(let y)): return x == y ? 0 : (x < y ? -1 : 1)
        case (.double(let x), .double(let y)): return compareDoubles(x, y)
        case (.int(let x), .double(let y)): return compareIntDouble(x, y)
        case (.double(let x), .int(let y)): return compareIntDouble(y, x).map { -$0 }
        default: return nil
        }
    }

    static func compareDoubles(_ x: Double, _ y: Double) -> Int {
        if x.isNaN || y.isNaN { return x.isNaN == y.isNaN ? 0 : (x.isNaN ? 1 : -1) }
        return x == y ? 0 : (x < y ? -1 : 1)
    }

    static let twoTo53: Double = 9_007_199_254_740_992

    static func compareIntDouble(_ i: Int64, _ d: Double) -> Int? {
        if d.isNaN { return -1 }
        if abs(d) >= twoTo53, i.magnitude > 1 << 53, let decimal = decimalInteger(d) {
            // Both beyond 2^53: compare with the double's printed decimal (see the file comment).
            return i == decimal ? 0 : (i < decimal ? -1 : 1)
        }
        if d >= 9_223_372_036_854_775_808.0 { return -1 }
        if d < -9_223_372_036_854_775_808.0 { return 1 }
        let t = d.rounded(.towardZero)
        let ti = Int64(t)
        if i != ti { return i < ti ? -1 : 1 }
        let frac = d - t
        return frac == 0 ? 0 : (frac > 0 ? -1 : 1)
    }

    /// The integer value of a double's shortest round-trip decimal, when |d| >= 2^53 and it fits Int64.
    static func decimalInteger(_ d: Double) -> Int64? {
        guard d.isFinite, abs(d) >= twoTo53, abs(d) < 9.3e18 else { return nil }
        let text = d.description  // e.g. "1.152921504606847e+18" or "9007199254740994.0"
        var mantissa = ""
        var exponent = 0
        var fractionDigits = 0
        var seenDot = false
        var rest = Substring(text)
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            exponent = Int(text[text.index(after: e)...]) ?? 0
            rest = text[..<e]
        }
        for ch in rest {
            if ch == "." { seenDot = true; continue }
            mantissa.append(ch)
            if seenDot { fractionDigits += 1 }
        }
        var scale = exponent - fractionDigits
        // Trailing zeros of the fraction ("...994.0") are not significant.
        while scale < 0, mantissa.hasSuffix("0") {
            mantissa.removeLast()
            scale += 1
        }
        guard scale >= 0, var value = Int64(mantissa) else { return nil }
        for _ in 0..<scale {
            let (m, o) = value.multipliedReportingOverflow(by: 10)
            if o { return nil }
            value = m
        }
        return value
    }

    /// DQL `=`: false across type classes, otherwise the total order's equality.
    static func equal(_ a: Value, _ b: Value) -> Bool {
        typeClass(a) == typeClass(b) && compare(a, b) == 0
    }
}

/// A hashable key with DQL equality, for DISTINCT, GROUP BY and `array_distinct`: numbers that compare
/// equal share a key (1 and 1.0), strings compare by bytes.
indirect enum GroupKey: Hashable {
    case missing, null, bool(Bool), int(Int64), double(UInt64), string([UInt8]), array([GroupKey]), object([[UInt8]], [GroupKey])

    init(_ v: Value?) {
        guard let v else { self = .missing; return }
        switch v {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .int(let i): self = .int(i)
        case .double(let d):
            if d == 0 { self = .int(0) }
            else if abs(d) < DQLOrder.twoTo53, d.rounded() == d { self = .int(Int64(d)) }
            else if let i = DQLOrder.decimalInteger(d) { self = .int(i) }
            else { self = .double(d.isNaN ? Double.nan.bitPattern : d.bitPattern) }
        case .string(let s): self = .string(Array(s.utf8))
        case .array(let a): self = .array(a.map { GroupKey($0) })
        case .object(let o):
            let keys = JSONWriter.sortedKeys(o)
            self = .object(keys.map { Array($0.utf8) }, keys.map { GroupKey(o[$0]) })
        }
    }
}
