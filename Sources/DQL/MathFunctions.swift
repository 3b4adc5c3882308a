// Math functions and array/object functions.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Values

enum MathFunctions {
    static func call(_ name: String, _ a: [Value]) throws(DQLEvaluationError) -> Value? {
        switch name {
        case "abs":
            try Functions.arity(name, a, 1...1)
            switch a[0] {
            case .int(let i):
                guard i != Int64.min else { throw .numericOverflow("abs(\(i))") }
                return .int(Swift.abs(i))
            case .double(let d): return .double(Swift.abs(d))
            default: return .null
            }
        case "ceil", "floor", "trunc":
            try Functions.arity(name, a, 1...1)
            switch a[0] {
            case .int: return a[0]
            case .double(let d):
                let rule: FloatingPointRoundingRule = name == "ceil" ? .up : name == "floor" ? .down : .towardZero
                return integral(d.rounded(rule))
            default: return .null
            }
        case "round":
            // round(x [, digits]): half away from zero; with no digits the result is an integer when it fits.
            try Functions.arity(name, a, 1...2)
            var digits: Int64 = 0
            if a.count == 2 {
                guard let n = a[1].int64Value, n >= -18, n <= 18 else { return .null }
                digits = n
            }
            switch a[0] {
            case .int(let i) where digits >= 0: return .int(i)
            case .int, .double:
                guard let x = a[0].doubleValue else { return .null }
                if digits == 0 { return integral(x.rounded(.toNearestOrAwayFromZero)) }
                let scale = pow(10.0, Double(digits))
                let r = (x * scale).rounded(.toNearestOrAwayFromZero) / scale
                guard r.isFinite else { return .double(x) }
                return .double(r)
            default: return .null
            }
        case "sign":
            try Functions.arity(name, a, 1...1)
            guard let x = a[0].doubleValue else { return .null }
            return .int(x > 0 ? 1 : x < 0 ? -1 : 0)
        case "sqrt", "ln", "log10", "exp":
            try Functions.arity(name, a, 1...1)
            guard let x = a[0].doubleValue else { return .null }
            let r: Double
            switch name {
            case "sqrt": r = x < 0 ? .nan : x.squareRoot()
            case "ln": r = x <= 0 ? .nan : log(x)
            case "log10": r = x <= 0 ? .nan : log10(x)
            default: r = exp(x)
            }
            if r.isNaN { return .null }
            guard r.isFinite else { throw .numericOverflow("\(name)(\(x))") }
            return .double(r)
        case "power", "pow":
            try Functions.arity(name, a, 2...2)
            guard let x = a[0].doubleValue, let y = a[1].doubleValue else { return .null }
            if case .int(let b) = a[0], case .int(let e) = a[1], e >= 0 {
                // Exponentiation by squaring: O(log e) steps. A squared base that overflows would be
                // multiplied into the result later (a higher bit is set), so it is an overflow too.
                var result: Int64 = 1, base = b, exponent = e
                while exponent > 0 {
                    if exponent & 1 == 1 {
                        let (m, o) = result.multipliedReportingOverflow(by: base)
                        if o { throw .numericOverflow("power(\(b), \(e))") }
                        result = m
                    }
                    exponent >>= 1
                    if exponent > 0 {
                        let (sq, o) = base.multipliedReportingOverflow(by: base)
                        if o { throw .numericOverflow("power(\(b), \(e))") }
                        base = sq
                    }
                }
                return .int(result)
            }
            let r = pow(x, y)
            if r.isNaN { return .null }
            guard r.isFinite else { throw .numericOverflow("power(\(x), \(y))") }
            return .double(r)
        default:
            return nil
        }
    }

    /// An integral double as an int when it fits exactly, else as a double.
    static func integral(_ d: Double) -> Value {
        if Swift.abs(d) < 9_223_372_036_854_775_808.0 { return .int(Int64(d)) }
        return .double(d)
    }
}

enum CollectionFunctions {
    static func call(_ name: String, _ a: [Value], context: EvaluationContext) throws(DQLEvaluationError) -> Value? {
        // One step per element or member of every array/object argument; a sort n·log2(n).
        if context.budget != nil {
            var elements = 0
            for v in a {
                switch v {
                case .array(let items): elements += name == "array_sort" ? items.count * SortCost.log2(items.count) : items.count
                case .object(let o): elements += o.count
                default: break
                }
            }
            try context.charge(elements)
        }
        switch name {
        case "array_contains":
            try Functions.arity(name, a, 2...2)
            guard case .array(let items) = a[0] else { return .null }
            return .bool(items.contains { DQLOrder.equal($0, a[1]) })
        case "array_length":
            try Functions.arity(name, a, 1...1)
            guard case .array(let items) = a[0] else { return .null }
            return .int(Int64(items.count))
        case "array_concat":
            try Functions.arity(name, a, 2...Int.max)
            var out: [Value] = []
            for v in a {
                guard case .array(let items) = v else { return .null }
                out += items
                guard out.count <= context.maxResultBytes / 8 else { throw .limitExceeded("array_concat result too large") }
            }
            return .array(out)
        case "array_distinct":
            try Functions.arity(name, a, 1...1)
            guard case .array(let items) = a[0] else { return .null }
            var seen = Set<GroupKey>()
            return .array(items.filter { seen.insert(GroupKey($0)).inserted })
        case "array_reverse":
            try Functions.arity(name, a, 1...1)
            guard case .array(let items) = a[0] else { return .null }
            return .array(items.reversed())
        case "array_sort":
            try Functions.arity(name, a, 1...1)
            guard case .array(let items) = a[0] else { return .null }
            return .array(items.sorted { DQLOrder.compare($0, $1) < 0 })
        case "object_keys":
            try Functions.arity(name, a, 1...1)
            guard case .object(let o) = a[0] else { return .null }
            return .array(JSONWriter.sortedKeys(o).map { .string($0) })
        case "object_values":
            try Functions.arity(name, a, 1...1)
            guard case .object(let o) = a[0] else { return .null }
            return .array(JSONWriter.sortedKeys(o).compactMap { o[$0] })
        case "object_length":
            try Functions.arity(name, a, 1...1)
            guard case .object(let o) = a[0] else { return .null }
            return .int(Int64(o.count))
        case "object_contains":
            try Functions.arity(name, a, 2...2)
            guard case .object(let o) = a[0], case .string(let k) = a[1] else { return .null }
            return .bool(o[k] != nil)
        default:
            return nil
        }
    }
}

enum SortCost {
    /// ⌈log2(n)⌉, at least 1: a sort of n elements is charged n·log2(n) steps.
    static func log2(_ n: Int) -> Int { n <= 2 ? 1 : Int.bitWidth - (n - 1).leadingZeroBitCount }
}
