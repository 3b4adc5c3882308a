import Testing
import Values
@testable import DQL

@Suite struct EvaluatorTests {
    static let doc: Value = ["s": "héllo", "n": 7, "d": 2.5, "z": nil, "a": [3, 1, 2, 1.0], "o": ["b": 1, "a": [true]], "j": "{\"k\":[1,2.5]}"]

    func eval(_ text: String, _ args: [String: Value] = [:]) throws -> Value? {
        guard case .select(let s) = try DQL.parse("SELECT " + text + " AS r FROM c"),
              case .expression(let e, _) = s.projections[0] else { return nil }
        return try Evaluator(context: EvaluationContext(arguments: args, nowMilliseconds: 1_700_000_000_123)).evaluate(e, in: Self.doc)
    }

    /// Expression, expected value (nil = MISSING).
    @Test(arguments: [
        // Arithmetic: exact ints, doubles, division rules.
        ("1 + 2", 3), ("7 / 2", 3.5), ("6 / 3", 2), ("7 % 3", 1), ("-7 % 3", -1), ("7.5 % 2", 1.5), ("1 / 0", .null),
        ("1 % 0", .null), ("2 * 1.5", 3.0), ("-n", -7), ("+d", 2.5), ("'a' + 1", .null), ("missing_field + 1", nil), ("z + 1", .null),
        // Comparisons and logic with MISSING and NULL.
        ("1 = 1.0", true), ("1 = '1'", false), ("1 < 'a'", .null), ("z = 1", .null), ("nope = 1", nil),
        ("TRUE AND z = 1", .null), ("FALSE AND nope = 1", false), ("nope = 1 OR TRUE", true), ("nope = 1 OR z = 1", nil),
        ("NOT (z = 1)", .null), ("[1, 2] = [1.0, 2]", true), ("{'a': 1} = {'a': 1}", true), ("[1] < [1, 0]", true),
        ("'B' < 'a'", true), ("'é' > 'z'", true),
        // IN, BETWEEN, LIKE.
        ("n IN (1, 7)", true), ("n NOT IN (1, 7)", false), ("z IN (1)", .null), ("nope IN (1)", nil), ("1 IN a", true),
        ("n BETWEEN 7 AND 7", true), ("s LIKE 'h_llo'", true), ("s LIKE 'H%'", false), ("s ILIKE 'H%'", true),
        ("'50%' LIKE '50\\%'", true), ("'50x' LIKE '50\\%'", false), ("'a_b' LIKE 'a!_b' ESCAPE '!'", true), ("n LIKE '7'", .null),
        // IS.
        ("z IS NULL", true), ("nope IS NULL", false), ("nope IS MISSING", true), ("z IS NOT MISSING", true),
        // Paths and literals.
        ("o.a[0]", true), ("o['b']", 1), ("a[9]", nil), ("s.x", nil), ("{'k': nope, 'v': 1}", ["v": 1]), ("[nope]", [nil]),
        // Strings.
        ("s || '!'", "héllo!"), ("concat(s, '-', 'x')", "héllo-x"), ("contains(s, 'éll')", true), ("starts_with(s, 'hé')", true),
        ("ends_with(s, 'lo')", true), ("lower('ÀB')", "àb"), ("upper(s)", "HÉLLO"), ("trim('  x ')", "x"), ("ltrim('xxyx', 'x')", "yx"),
        ("rtrim('  x ')", "  x"), ("byte_length(s)", 6), ("char_length(s)", 5), ("substring(s, 2, 3)", "éll"), ("substring(s, 4)", "lo"), ("substring(s, -1, 3)", "h"), ("substring(s, 0)", "héllo"),
        ("substring(s, -9223372036854775808, 9223372036854775807)", ""), ("substring(s, 9223372036854775807, 9223372036854775807)", ""),
        ("substring(s, 2, 0)", ""), ("substring(s, 2, -1)", .null),
        ("replace(s, 'l', 'L')", "héLLo"), ("regexp_like(s, '^h.l+o$')", true), ("to_string(o)", "{\"a\":[true],\"b\":1}"),
        ("deserialize_json(j).k[1]", 2.5), ("deserialize_json(:p)", ["x": nil]),
        // Math.
        ("abs(-3)", 3), ("abs(-2.5)", 2.5), ("ceil(2.1)", 3), ("floor(-2.1)", -3), ("round(2.5)", 3), ("round(-2.5)", -3),
        ("round(3.14159, 2)", 3.14), ("trunc(-2.7)", -2), ("sign(-d)", -1), ("sqrt(16)", 4.0), ("sqrt(-1)", .null),
        ("power(2, 10)", 1024), ("power(2, 0.5)", 1.4142135623730951), ("ln(1)", 0.0), ("log10(1000)", 3.0), ("exp(0)", 1.0),
        // Arrays and objects.
        ("array_length(a)", 4), ("array_contains(a, 1)", true), ("array_concat(a, [9])", [3, 1, 2, 1.0, 9]), ("array_distinct(a)", [3, 1, 2]),
        ("array_sort(a)", [1, 1.0, 2, 3]), ("array_reverse([1, 'x'])", ["x", 1]), ("object_keys(o)", ["a", "b"]),
        ("object_values(o)", [[true], 1]), ("object_length(o)", 2), ("object_contains(o, 'b')", true),
        // Conditionals and type checks.
        ("coalesce(nope, z, 3)", 3), ("coalesce(nope, z)", .null), ("ifmissing(nope, 1)", 1), ("ifnull(z, 2)", 2),
        ("ifmissingornull(z, 3)", 3), ("nullif(n, 7)", .null), ("iif(n > 5, 'big', 'small')", "big"), ("min(3, z, 1)", 1),
        ("max('a', 2)", "a"), ("type(nope)", "missing"), ("type(z)", "null"), ("type(d)", "number"), ("is_string(s)", true),
        ("is_number(s)", false), ("is_boolean(o.a[0])", true), ("is_array(a)", true), ("is_object(o)", true), ("is_null(z)", true),
        ("is_missing(nope)", true), ("is_integer(2.0)", true),
        // Strict functions: MISSING first, then NULL.
        ("lower(nope)", nil), ("lower(z)", .null), ("lower(1)", .null),
        // Dates.
        ("now()", "2023-11-14T22:13:20.123Z"), ("clock()", 1_700_000_000_123), ("date_to_epoch_ms('1970-01-02')", 86_400_000),
        ("date_to_epoch_ms('2024-02-29T01:00:00+01:00')", 1_709_164_800_000), ("epoch_ms_to_date(0)", "1970-01-01T00:00:00.000Z"),
        ("date_add('2024-01-31T10:00:00Z', 1, 'month')", "2024-02-29T10:00:00.000Z"), ("date_add('2024-02-29', 1, 'years')", "2025-02-28T00:00:00.000Z"),
        ("date_add('2024-01-01', -36, 'hours')", "2023-12-30T12:00:00.000Z"), ("date_diff('2024-01-31', '2024-02-29', 'month')", 0),
        ("date_diff('2024-01-31', '2024-03-01', 'month')", 1), ("date_diff('2024-01-01', '2024-01-08T12:00:00Z', 'day')", 7),
        ("date_part('2024-02-29T13:14:15.678Z', 'millisecond')", 678), ("date_part('2024-02-29', 'dow')", 4), ("date_part('2024-12-31', 'doy')", 366),
        ("date_trunc('2024-02-29T13:14:15Z', 'hour')", "2024-02-29T13:00:00.000Z"), ("date_trunc('2024-02-29T13:14:15Z', 'week')", "2024-02-26T00:00:00.000Z"),
        ("date_trunc('2024-02-29T13:14:15Z', 'year')", "2024-01-01T00:00:00.000Z"), ("date_to_epoch_ms('2023-02-29')", .null), ("date_to_epoch_ms('x')", .null),
    ] as [(String, Value?)])
    func evaluate(_ text: String, _ expected: Value?) throws {
        let got = try eval(text, ["p": .string("{\"x\":null}")])
        #expect(got == expected, "\(text) gave \(String(describing: got))")
    }

    @Test func overflow_isAnErrorNotAPrecisionLoss() throws {
        #expect(throws: DQLEvaluationError.numericOverflow("9223372036854775807 + 1")) { try eval("9223372036854775807 + 1") }
        #expect(throws: DQLEvaluationError.numericOverflow("-(-9223372036854775808)")) { try eval("-(-9223372036854775808)") }
        #expect(throws: DQLEvaluationError.numericOverflow("-9223372036854775808 / -1")) { try eval("-9223372036854775808 / -1") }
        #expect(throws: DQLEvaluationError.numericOverflow("abs(-9223372036854775808)")) { try eval("abs(-9223372036854775808)") }
        #expect(throws: DQLEvaluationError.numericOverflow("power(2, 64)")) { try eval("power(2, 64)") }
        #expect(throws: DQLEvaluationError.numericOverflow("1e+308 * 10.0")) { try eval("1e308 * 10.0") }
        #expect(try eval("-9223372036854775808 % -1") == 0)
        #expect(try eval("power(-1, 9223372036854775807)") == -1)
    }

    @Test func numbers_compareByTheirJSONDecimal() {
        // Below 2^53 comparisons are exact.
        #expect(DQLOrder.compareNumbers(.int(3), .double(2.5)) == 1)
        #expect(DQLOrder.compareNumbers(.int(-3), .double(-2.5)) == -1)
        #expect(DQLOrder.compareNumbers(.int(9007199254740993), .double(9007199254740992)) == 1)
        // Beyond, an integer meets the double's printed decimal: 2^60 prints as 1.152921504606847e+18.
        let d = Double(1 << 60)
        #expect(d.description == "1.152921504606847e+18")
        #expect(DQLOrder.compareNumbers(.int(1_152_921_504_606_847_000), .double(d)) == 0)
        #expect(DQLOrder.compareNumbers(.int(1_152_921_504_606_846_980), .double(d)) == -1)
        #expect(GroupKey(.double(d)) == GroupKey(.int(1_152_921_504_606_847_000)))
        #expect(DQLOrder.compareNumbers(.int(Int64.max), .double(9.3e18)) == -1)
        #expect(DQLOrder.compareNumbers(.int(Int64.min), .double(-1e19)) == 1)
        #expect(DQLOrder.compare(.double(.nan), .double(.infinity)) == 1)
    }

    @Test func functions_arityErrors() {
        #expect(throws: DQLEvaluationError.wrongArgumentCount(function: "coalesce", expected: "at least 1", got: 0)) { try eval("coalesce()") }
        #expect(throws: DQLEvaluationError.wrongArgumentCount(function: "substring", expected: "2 to 3", got: 1)) { try eval("substring(s)") }
        #expect(throws: DQLEvaluationError.self) { try eval("deserialize_json('{bad')") }
        #expect(throws: DQLEvaluationError.self) { try eval("regexp_like(s, '(')") }
    }
}
