// Scalar functions. Unless a function says otherwise: a MISSING argument gives MISSING, a NULL
// argument gives NULL, and an argument of the wrong type gives NULL (so one odd document never fails
// a whole query). Type checks and conditionals look at MISSING/NULL themselves. Every function is
// listed with an example in docs/DQL.md.

import Values

enum Functions {
    typealias Args = [Value?]

    static func call(_ name: String, _ args: Args, context: EvaluationContext) throws(DQLEvaluationError) -> Value? {
        // Functions that handle MISSING/NULL themselves.
        switch name {
        case "coalesce":
            try arity(name, args, 1...Int.max)
            for a in args { if let v = a, v != .null { return v } }
            return .null
        case "ifmissing":
            try arity(name, args, 2...2)
            return args[0] ?? args[1]
        case "ifnull":
            try arity(name, args, 2...2)
            return args[0] == .null ? args[1] : args[0]
        case "ifmissingornull":
            try arity(name, args, 2...2)
            return args[0] == nil || args[0] == .null ? args[1] : args[0]
        case "nullif":
            try arity(name, args, 2...2)
            if let a = args[0], let b = args[1], DQLOrder.equal(a, b) { return .null }
            return args[0]
        case "iif":
            try arity(name, args, 3...3)
            return args[0] == .bool(true) ? args[1] : args[2]
        case "type":
            try arity(name, args, 1...1)
            return .string(args[0]?.typeName ?? "missing")
        case "is_string", "is_number", "is_boolean", "is_array", "is_object", "is_null", "is_missing", "is_integer":
            try arity(name, args, 1...1)
            return .bool(typeCheck(name, args[0]))
        case "now":
            try arity(name, args, 0...0)
            return .string(DateFunctions.format(milliseconds: context.nowMilliseconds))
        case "clock":
            try arity(name, args, 0...0)
            return .int(context.nowMilliseconds)
        case "min", "max":
            // Scalar min/max over several arguments (one argument is the aggregate); NULL and MISSING are skipped.
            try arity(name, args, 2...Int.max)
            var best: Value?
            for case let v? in args where v != .null {
                if let b = best {
                    let c = DQLOrder.compare(v, b)
                    if name == "min" ? c < 0 : c > 0 { best = v }
                } else {
                    best = v
                }
            }
            return best ?? .null
        default: break
        }
        // Everything else is strict in MISSING, then NULL.
        for a in args where a == nil { return nil }
        for a in args where a == .null { return .null }
        let values = args.map { $0 ?? .null }
        if let v = try StringFunctions.call(name, values, context: context) { return v }
        if let v = try MathFunctions.call(name, values) { return v }
        if let v = try CollectionFunctions.call(name, values, context: context) { return v }
        if let v = try DateFunctions.call(name, values) { return v }
        throw .unknownFunction(name, arity: args.count)
    }

    static func arity(_ name: String, _ args: Args, _ range: ClosedRange<Int>) throws(DQLEvaluationError) {
        guard range.contains(args.count) else {
            let expected = range.lowerBound == range.upperBound ? "\(range.lowerBound)"
                : range.upperBound == Int.max ? "at least \(range.lowerBound)" : "\(range.lowerBound) to \(range.upperBound)"
            throw .wrongArgumentCount(function: name, expected: expected, got: args.count)
        }
    }

    static func arity(_ name: String, _ args: [Value], _ range: ClosedRange<Int>) throws(DQLEvaluationError) {
        try arity(name, args.map { Optional($0) }, range)
    }

    static func typeCheck(_ name: String, _ v: Value?) -> Bool {
        switch (name, v) {
        case ("is_missing", nil): return true
        case ("is_null", .null?): return true
        case ("is_string", .string?): return true
        case ("is_number", .int?), ("is_number", .double?): return true
        case ("is_integer", .int?): return true
        case ("is_integer", .double(let d)?): return d.isFinite && d.rounded() == d
        case ("is_boolean", .bool?): return true
        case ("is_array", .array?): return true
        case ("is_object", .object?): return true
        default: return false
        }
    }
}

enum StringFunctions {
    static func call(_ name: String, _ a: [Value], context: EvaluationContext) throws(DQLEvaluationError) -> Value? {
        // Every string function reads its string arguments at least once: one step per byte.
        if context.budget != nil {
            var bytes = 0
            for case .string(let s) in a { bytes += s.utf8.count }
            try context.charge(bytes)
        }
        switch name {
        case "concat":
            try Functions.arity(name, a, 1...Int.max)
            var out = ""
            for v in a {
                guard case .string(let s) = v else { return .null }
                out += s
                guard out.utf8.count <= context.maxResultBytes else { throw .limitExceeded("concat result larger than \(context.maxResultBytes) bytes") }
            }
            return .string(out)
        case "contains", "starts_with", "ends_with":
            try Functions.arity(name, a, 2...2)
            guard case .string(let s) = a[0], case .string(let t) = a[1] else { return .null }
            // Bytes, not `Character`s: canonically equivalent strings are different strings here,
            // as in PostgreSQL; and a linear search (KMP), whatever the needle.
            switch name {
            case "starts_with": return .bool(s.utf8.starts(with: t.utf8))
            case "ends_with": return .bool(s.utf8.reversed().starts(with: t.utf8.reversed()))
            default:
                let needle = Array(t.utf8)
                let found = try SubstringSearch.firstIndex(of: needle, table: SubstringSearch.failureTable(needle),
                                                           in: Array(s.utf8)[...], budget: context.budget)
                return .bool(found != nil)
            }
        case "lower", "upper":
            try Functions.arity(name, a, 1...1)
            guard case .string(let s) = a[0] else { return .null }
            return .string(name == "lower" ? s.lowercased() : s.uppercased())
        case "trim", "ltrim", "rtrim":
            try Functions.arity(name, a, 1...2)
            guard case .string(let s) = a[0] else { return .null }
            var set: Set<Unicode.Scalar> = [" ", "\t", "\n", "\r"]
            if a.count == 2 {
                guard case .string(let chars) = a[1] else { return .null }
                set = Set(chars.unicodeScalars)
            }
            var scalars = Array(s.unicodeScalars)[...]
            if name != "rtrim" { while let f = scalars.first, set.contains(f) { scalars.removeFirst() } }
            if name != "ltrim" { while let l = scalars.last, set.contains(l) { scalars.removeLast() } }
            var out = ""
            out.unicodeScalars.append(contentsOf: scalars)
            return .string(out)
        case "byte_length":
            try Functions.arity(name, a, 1...1)
            guard case .string(let s) = a[0] else { return .null }
            return .int(Int64(s.utf8.count))
        case "char_length", "character_length", "length":
            try Functions.arity(name, a, 1...1)
            guard case .string(let s) = a[0] else { return .null }
            return .int(Int64(s.unicodeScalars.count))
        case "substring", "substr":
            // substring(s, start [, length]): 1-based positions in Unicode scalars, as in SQL.
            try Functions.arity(name, a, 2...3)
            guard case .string(let s) = a[0], let start = a[1].int64Value else { return .null }
            let scalars = Array(s.unicodeScalars)
            // 0-based first position, then clamped; additions saturate so extreme arguments cannot overflow.
            let count = Int64(scalars.count)
            let first = start == Int64.min ? Int64.min : start - 1
            let from = min(max(first, 0), count)
            var to = count
            if a.count == 3 {
                guard let len = a[2].int64Value, len >= 0 else { return .null }
                let (end, overflow) = first.addingReportingOverflow(len)
                to = overflow ? count : min(count, max(0, end))
            }
            var out = ""
            if from < to { out.unicodeScalars.append(contentsOf: scalars[Int(from)..<Int(to)]) }
            return .string(out)
        case "replace":
            try Functions.arity(name, a, 3...3)
            guard case .string(let s) = a[0], case .string(let from) = a[1], case .string(let to) = a[2] else { return .null }
            guard !from.isEmpty else { return .string(s) }
            // Byte-wise and linear (KMP): `String.split(separator:)` compared `Character`s (so a
            // canonically equivalent spelling was replaced too) with a search that is not linear.
            // Both strings are valid UTF-8, so a byte match starts and ends on scalar boundaries.
            let (subject, needle, replacement) = (Array(s.utf8), Array(from.utf8), Array(to.utf8))
            let hits = try SubstringSearch.occurrences(of: needle, in: subject, budget: context.budget)
            let size = subject.count + hits.count * (replacement.count - needle.count)
            guard size <= context.maxResultBytes else { throw .limitExceeded("replace result larger than \(context.maxResultBytes) bytes") }
            var out: [UInt8] = []
            out.reserveCapacity(size)
            var cursor = 0
            for at in hits {
                out += subject[cursor..<at]
                out += replacement
                cursor = at + needle.count
            }
            out += subject[cursor...]
            return .string(String(decoding: out, as: UTF8.self))
        case "regexp_like":
            try Functions.arity(name, a, 2...2)
            guard case .string(let s) = a[0], case .string(let p) = a[1] else { return .null }
            return .bool(try RegexMatch.matches(s, pattern: p, budget: context.budget))
        case "to_string":
            try Functions.arity(name, a, 1...1)
            if case .string = a[0] { return a[0] }
            return .string(JSON.string(a[0]))
        case "deserialize_json":
            try Functions.arity(name, a, 1...1)
            guard case .string(let s) = a[0] else { return .null }
            do {
                return try JSON.parse(s, limits: JSONLimits(maxInputBytes: context.maxResultBytes))
            } catch {
                throw .invalidArgument(function: "deserialize_json", reason: error.description)
            }
        default:
            return nil
        }
    }
}

/// `regexp_like`: our own linear-time engine (`RegexProgram`, docs/DQL.md "Regular expressions"),
/// not the standard library's backtracking `Regex`, under which `^(a|a)*$` over "aaa…ab" took
/// seconds per added character. Cost is charged to the evaluation's budget.
enum RegexMatch {
    static let maxPatternLength = 1_000
    static let maxSubjectLength = 64 * 1024

    static func matches(_ s: String, pattern: String, budget: EvaluationBudget? = nil) throws(DQLEvaluationError) -> Bool {
        guard pattern.utf8.count <= maxPatternLength else {
            throw .invalidArgument(function: "regexp_like", reason: "pattern longer than \(maxPatternLength) bytes")
        }
        guard s.utf8.count <= maxSubjectLength else {
            throw .invalidArgument(function: "regexp_like", reason: "subject longer than \(maxSubjectLength) bytes")
        }
        let program: RegexProgram
        do { program = try RegexCache.program(for: pattern) } catch {
            throw .invalidArgument(function: "regexp_like", reason: "invalid regular expression: \(error)")
        }
        return try program.matches(s, budget: budget)
    }
}
