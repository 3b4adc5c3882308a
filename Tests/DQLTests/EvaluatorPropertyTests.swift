import Testing
import TestRandomness
import Values
@testable import DQL

/// Random expressions (every function, extreme numbers, every type) over random documents:
/// evaluation returns a value or a typed DQLEvaluationError, never traps.
@Suite struct EvaluatorPropertyTests {
    static let functions = [
        "coalesce", "ifmissing", "ifnull", "ifmissingornull", "nullif", "iif", "type", "is_string", "is_number", "is_boolean",
        "is_array", "is_object", "is_null", "is_missing", "is_integer", "now", "clock", "min", "max", "concat", "contains",
        "starts_with", "ends_with", "lower", "upper", "trim", "ltrim", "rtrim", "byte_length", "char_length", "substring",
        "replace", "regexp_like", "to_string", "deserialize_json", "abs", "ceil", "floor", "trunc", "round", "sign", "sqrt",
        "ln", "log10", "exp", "power", "array_contains", "array_length", "array_concat", "array_distinct", "array_reverse",
        "array_sort", "object_keys", "object_values", "object_length", "object_contains", "date_to_epoch_ms",
        "epoch_ms_to_date", "date_add", "date_diff", "date_part", "date_trunc",
    ]
    static let extremes: [Value] = [
        .int(Int64.max), .int(Int64.min), .int(0), .int(-1), .int(1), .double(-0.0), .double(1e308), .double(-1e308),
        .double(.leastNonzeroMagnitude), .double(.nan), .double(.infinity), .double(0.5), "", "[1,{\"a\":2}]", "2024-02-29T12:00:00Z", "x%_\\",
        "month", "(a+)+$", "é😀", .null, .bool(true), [], [1, "a", nil], [:], ["k": [1]],
    ]

    func expression(_ rng: inout SplitMix64, _ depth: Int) -> Expression {
        if depth == 0 || rng.chance(30) {
            switch rng.below(3) {
            case 0: return .literal(Self.extremes[rng.below(Self.extremes.count)])
            case 1: return .path(Path(["a", "b", "c", "nope"][rng.below(4)]))
            default: return .parameter("p")
            }
        }
        let d = depth - 1
        switch rng.below(8) {
        case 0, 1, 2: return .call(Self.functions[rng.below(Self.functions.count)], (0..<rng.below(4)).map { _ in expression(&rng, d) })
        case 3: return .binary(BinaryOperator.allCases[rng.below(BinaryOperator.allCases.count)], expression(&rng, d), expression(&rng, d))
        case 4: return .unary([.not, .negate, .plus][rng.below(3)], expression(&rng, d))
        case 5: return .like(expression(&rng, d), pattern: expression(&rng, d), escape: rng.chance(30) ? expression(&rng, d) : nil, caseInsensitive: rng.chance(50), negated: false)
        case 6: return .inArray(expression(&rng, d), expression(&rng, d), negated: rng.chance(50))
        default: return .between(expression(&rng, d), low: expression(&rng, d), high: expression(&rng, d), negated: false)
        }
    }

    @Test func randomExpressions_neverTrap() {
        var rng = SplitMix64(seed: 31337)
        let ev = Evaluator(context: EvaluationContext(arguments: ["p": .int(Int64.min)], nowMilliseconds: Int64.max, maxResultBytes: 1 << 16))
        var errors = 0, values = 0
        for _ in 0..<20_000 {
            let e = expression(&rng, 4)
            let doc: Value = ["a": Self.extremes[rng.below(Self.extremes.count)], "b": Self.extremes[rng.below(Self.extremes.count)],
                              "c": Self.extremes[rng.below(Self.extremes.count)]]
            do { _ = try ev.evaluate(e, in: doc); values += 1 } catch { errors += 1 }
        }
        #expect(values > 10_000 && errors > 100)
    }

    /// Random SELECTs (filter, grouping, an aggregate, ordering) over random documents: each
    /// either returns rows or throws a `DQLEvaluationError` (typed: nothing else can come out), and
    /// the seed gives plenty of both, so neither path goes untested.
    @Test func randomQueries_returnRowsOrATypedError_neverTrap() {
        var rng = SplitMix64(seed: 4242)
        let docs: [Value] = (0..<50).map { _ in ["a": Self.extremes[rng.below(Self.extremes.count)], "b": Self.extremes[rng.below(Self.extremes.count)]] }
        var answered = 0, refused = 0, rows = 0
        for _ in 0..<300 {
            var s = SelectStatement(projections: [.expression(expression(&rng, 2), alias: "x"), .expression(.aggregate(.sum, expression(&rng, 1), distinct: rng.chance(50)), alias: "s")],
                                    from: CollectionReference("c"))
            s.filter = expression(&rng, 3)
            s.groupBy = rng.chance(50) ? [expression(&rng, 1)] : []
            s.orderBy = [OrderingTerm(expression(&rng, 2), descending: rng.chance(50))]
            do throws(DQLEvaluationError) {
                let result = try SelectQuery(s, context: EvaluationContext(arguments: ["p": .double(-0.0)])).run(docs)
                #expect(result.count <= docs.count, "an aggregate over 50 documents has at most 50 groups")
                answered += 1
                rows += result.count
            } catch {
                refused += 1
            }
        }
        #expect(answered + refused == 300)
        #expect(answered >= 30 && refused >= 30, "answered \(answered) (\(rows) rows), refused \(refused)")
        #expect(rows > 0)
    }
}
