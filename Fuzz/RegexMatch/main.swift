// libFuzzer entry point for `regexp_like`'s engine (Sources/DQL/RegexSyntax.swift, RegexProgram.swift).
// The first byte splits the input into a pattern and a subject. Oracle: the pattern compiles or is
// refused with a positioned message (never a crash, never a stack overflow), and a search visits
// at most 2 × (subject scalars + 2) × instructions states: the linear-time guarantee. Run with
// scripts/fuzz.sh RegexMatch SECONDS; crashers belong in Tests/DQLTests/RegexTests.swift.
#if canImport(DQL)
@testable import DQL
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRegexMatch(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let split = min(Int(bytes[0]), size - 1)
    let pattern = String(decoding: bytes[1..<(1 + split)], as: UTF8.self)
    let subject = String(decoding: bytes[(1 + split)...], as: UTF8.self)
    let program: RegexProgram
    do { program = try RegexProgram.compile(pattern) } catch {
        precondition(error.offset >= 0 && !error.message.isEmpty, "unpositioned refusal: \(error)")
        return 0
    }
    let budget = EvaluationBudget()
    _ = try? program.matches(subject, budget: budget)
    let bound = 2 * (subject.unicodeScalars.count + 2) * program.instructions.count
    precondition(budget.steps <= bound, "\(budget.steps) steps > \(bound) for \(pattern.debugDescription)")
    return 0
}
