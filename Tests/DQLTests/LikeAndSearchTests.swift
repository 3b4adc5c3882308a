import Testing
import TestRandomness
import Values
@testable import DQL

@Suite struct LikeAndSearchTests {
    /// The textbook dynamic program over (text position, pattern position): slow and obviously right.
    static func reference(_ text: [Unicode.Scalar], _ p: [LikePattern.Element]) -> Bool {
        var row = [Bool](repeating: false, count: p.count + 1)
        row[0] = true
        for j in 0..<p.count { row[j + 1] = row[j] && p[j] == .any }
        for c in text {
            var next = [Bool](repeating: false, count: p.count + 1)
            for j in 0..<p.count {
                switch p[j] {
                case .any: next[j + 1] = next[j] || row[j + 1]
                case .one: next[j + 1] = row[j]
                case .literal(let l): next[j + 1] = row[j] && l == c
                }
            }
            row = next
        }
        return row[p.count]
    }

    @Test func agreesWithTheDynamicProgramOnRandomPatterns() throws {
        var rng = SeededRandom(seed: 0x11CE)
        // Multi-byte scalars too: patterns without `_` are matched on UTF-8 bytes, the others on scalars.
        let alphabet: [Unicode.Scalar] = ["a", "b", "%", "_", "c", "\u{E9}", "\u{20AC}", "\u{1F600}"]
        for _ in 0..<20_000 {
            var pattern = ""
            for _ in 0..<rng.below(8) { pattern.unicodeScalars.append(alphabet[rng.below(alphabet.count)]) }
            var text = ""
            for _ in 0..<rng.below(10) { text.unicodeScalars.append(["a", "b", "c", "\u{E9}", "\u{20AC}", "\u{1F600}"][rng.below(6)]) }
            let compiled = try LikePattern(pattern, escape: "\\")
            let expected = Self.reference(Array(text.unicodeScalars), compiled.elements)
            #expect(try compiled.matches(text, caseInsensitive: false) == expected, "\(text.debugDescription) LIKE \(pattern.debugDescription)")
        }
    }

    /// The issue's LIKE: a 4,000-scalar pattern over an 8 MB argument blocked a loop for 29 s
    /// (O(text × pattern) backtracking on the last `%`). Literal segments are found by KMP now.
    @Test func longLiteralSegmentsOverLongTextsTakeLinearSteps() throws {
        let text = String(repeating: "a", count: 8 << 20)
        for pattern in ["%" + String(repeating: "a", count: 3_998) + "b%", "%" + String(repeating: "a", count: 3_999) + "b",
                        String(repeating: "%a", count: 1_999) + "%b"] {
            let budget = EvaluationBudget()
            #expect(try LikePattern(pattern, escape: "\\").matches(text, caseInsensitive: false, budget: budget) == false)
            #expect(budget.steps <= 4 * (text.utf8.count + pattern.utf8.count), "\(pattern.prefix(12))…: \(budget.steps) steps")
        }
    }

    /// The whole text is charged before it is converted for matching: an event loop's inline
    /// slice (`onLoopSteps`) stops at once on a 4 MiB argument instead of first decoding all of
    /// it (milliseconds of the loop per statement in the hostile mix, docs/performance-history.md).
    @Test func theTextIsChargedBeforeItIsConverted() throws {
        let text = String(repeating: "\u{E9}", count: 2 << 20)
        for pattern in ["%a%b", "%a_b%"] {
            let compiled = try LikePattern(pattern, escape: "\\")
            let slice = EvaluationBudget(maxSteps: InMemoryEvaluation.onLoopSteps, exhaustion: .yield)
            #expect(throws: DQLEvaluationError.sliceExhausted) { try compiled.matches(text, caseInsensitive: true, budget: slice) }
            #expect(slice.steps == text.utf8.count + compiled.elements.count)
        }
    }

    /// `_` inside a segment defeats KMP: the search is O(text × segment) but every comparison is
    /// charged, so a budget stops it.
    @Test func wildcardSegmentsAreChargedAndStopped() throws {
        let text = String(repeating: "a", count: 1 << 20)
        let pattern = "%" + String(repeating: "a_", count: 1_000) + "b%"
        let budget = EvaluationBudget(maxSteps: 5_000_000)
        #expect(throws: DQLEvaluationError.budgetExceeded(steps: 5_000_000)) {
            try LikePattern(pattern, escape: "\\").matches(text, caseInsensitive: false, budget: budget)
        }
    }

    @Test func containsAndReplaceAreByteWiseAndLinear() throws {
        let ev = Evaluator(context: EvaluationContext(arguments: [
            "s": .string(String(repeating: "a", count: 1 << 20)), "n": .string(String(repeating: "a", count: 4_000) + "b"),
            "e": .string("e\u{301}"), "nfc": .string("\u{E9}"),
        ], budget: EvaluationBudget()))
        func eval(_ text: String) throws -> Value? {
            guard case .select(let s) = try DQL.parse("SELECT " + text + " AS r FROM c"), case .expression(let e, _) = s.projections[0] else { return nil }
            return try ev.evaluate(e, in: [:])
        }
        #expect(try eval("contains(:s, :n)") == false)
        #expect(try eval("replace(:s, :n, 'x') = :s") == true)
        #expect(ev.context.budget!.steps < 20 << 20)
        // Canonically equivalent spellings are different strings (as in PostgreSQL).
        #expect(try eval("contains(:e, :nfc)") == false)
        #expect(try eval("replace(:e, :nfc, 'x')") == .string("e\u{301}"))
        #expect(try eval("replace('a-b-c', '-', '--')") == "a--b--c")
        #expect(try eval("replace('aaa', 'aa', 'b')") == "ba")
        #expect(try eval("replace('héllo', 'é', '')") == "hllo")
    }

    /// The planner folds constant conditions wherever the statement is planned (an event loop, for
    /// REST). `:big LIKE :p` with `_` segments is O(text × segment): folding it unbounded held the
    /// loop; now folding gives up after `constantFoldingSteps` and the term stays in the residual.
    @Test func thePlannerDoesNotFoldAnExpensiveConstant() throws {
        let args: [String: Value] = ["big": .string(String(repeating: "a", count: 1 << 20)),
                                     "p": .string("%" + String(repeating: "a_", count: 1_000) + "b%")]
        guard case .select(let s) = try DQL.parse("SELECT * FROM c WHERE n = iif(:big LIKE :p, 1, 2) AND m = 1") else { Issue.record("not a SELECT"); return }
        let plan = try PushdownPlanner().plan(s, context: EvaluationContext(arguments: args))
        #expect(plan.residual != nil)
        #expect(plan.pushedConditions.count == 1)
        // A cheap constant is still folded.
        guard case .select(let cheap) = try DQL.parse("SELECT * FROM c WHERE n = iif('abc' LIKE 'a%', 1, 2) AND m = 1") else { Issue.record("not a SELECT"); return }
        #expect(try PushdownPlanner().plan(cheap, context: EvaluationContext()).residual == nil)
    }
}
