// A regular expression compiled to a Thompson NFA and run as a Pike VM without captures (Thompson,
// 1968; Pike; as in RE2, Go's regexp and Rust's regex-automata). Every pc is in a thread list at
// most once per subject position, so a match costs at most O(program size × subject length)
// steps, whatever the pattern: `^(a|a)*$` over "aaa…b" is as cheap as `^a*$`. `regexp_like` asks
// only whether a match exists, so neither captures nor greedy/lazy priorities are tracked.

import Synchronization

enum RegexInstruction: Equatable, Sendable {
    case scalar(Unicode.Scalar)
    /// Index into `RegexProgram.sets`.
    case set(Int)
    case anyButNewline
    /// Continue at both targets.
    case split(Int, Int)
    case jump(Int)
    case assert(RegexAssertion)
    case match
}

struct RegexProgram: Sendable {
    /// Most instructions a pattern may compile to (repetitions are expanded: `(ab){1000}` is 2,000).
    static let maxInstructions = 20_000

    let instructions: [RegexInstruction]
    let sets: [ScalarSet]
    /// The pattern begins with `^`/`\A` in every way it can match: threads start at position 0 only.
    let anchoredAtStart: Bool

    static func compile(_ pattern: String) throws(RegexSyntaxError) -> RegexProgram {
        let node = try RegexParser.parse(pattern)
        var compiler = RegexCompiler()
        try compiler.emit(node)
        compiler.append(.match)
        if compiler.instructions.count > maxInstructions {
            throw RegexSyntaxError(message: "pattern compiles to more than \(maxInstructions) instructions (reduce repetition counts)", offset: 0)
        }
        return RegexProgram(instructions: compiler.instructions, sets: compiler.sets, anchoredAtStart: Self.startsAnchored(node))
    }

    static func startsAnchored(_ node: RegexNode) -> Bool {
        switch node {
        case .assertion(.start): true
        case .concat(let items): items.first.map(startsAnchored) ?? false
        case .alternation(let branches): branches.allSatisfy(startsAnchored)
        default: false
        }
    }

    /// Whether the pattern matches anywhere in `subject`. Charges `budget` one step per thread
    /// visited (in batches), so a caller's deadline or step limit stops a long search.
    func matches(_ subject: String, budget: EvaluationBudget?) throws(DQLEvaluationError) -> Bool {
        var machine = PikeMachine(program: self)
        return try machine.run(subject, budget: budget)
    }
}

/// The two thread lists and the closure stack of one search.
private struct PikeMachine {
    let program: RegexProgram
    /// Per pc: the position stamp of the list it was last added to (dedupes a list in O(1)).
    var stamp: [Int]
    var stack: [Int] = []
    var steps = 0

    init(program: RegexProgram) {
        self.program = program
        stamp = Array(repeating: -1, count: program.instructions.count)
    }

    /// Follows the empty transitions from `pc` at position stamp `position` (between `before` and
    /// `after`), appending the consuming instructions reached to `list`. True if `.match` is reached.
    mutating func addClosure(_ pc: Int, position: Int, before: Unicode.Scalar?, after: Unicode.Scalar?, into list: inout [Int]) -> Bool {
        stack.append(pc)
        while let pc = stack.popLast() {
            guard stamp[pc] != position else { continue }
            stamp[pc] = position
            steps += 1
            switch program.instructions[pc] {
            case .jump(let target):
                stack.append(target)
            case .split(let x, let y):
                stack.append(y)
                stack.append(x)
            case .assert(let a):
                if Self.holds(a, before: before, after: after) { stack.append(pc + 1) }
            case .match:
                stack.removeAll(keepingCapacity: true)
                return true
            case .scalar, .set, .anyButNewline:
                list.append(pc)
            }
        }
        return false
    }

    static func holds(_ a: RegexAssertion, before: Unicode.Scalar?, after: Unicode.Scalar?) -> Bool {
        switch a {
        case .start: before == nil
        case .end: after == nil
        case .wordBoundary: ScalarSet.isWord(before) != ScalarSet.isWord(after)
        case .notWordBoundary: ScalarSet.isWord(before) == ScalarSet.isWord(after)
        }
    }

    func consumes(_ pc: Int, _ s: Unicode.Scalar) -> Bool {
        switch program.instructions[pc] {
        case .scalar(let c): c == s
        case .set(let i): program.sets[i].contains(s)
        case .anyButNewline: !ScalarSet.isNewline(s)
        default: false
        }
    }

    mutating func run(_ subject: String, budget: EvaluationBudget?) throws(DQLEvaluationError) -> Bool {
        // The thread lists of this position and the next (consuming instructions only).
        var current: [Int] = [], next: [Int] = []
        current.reserveCapacity(program.instructions.count)
        next.reserveCapacity(program.instructions.count)
        var scalars = subject.unicodeScalars.makeIterator()
        var at = scalars.next()
        var position = 0
        if addClosure(0, position: position, before: nil, after: at, into: &current) { return true }
        while let c = at {
            let following = scalars.next()
            position += 1
            next.removeAll(keepingCapacity: true)
            for pc in current where consumes(pc, c) {
                if addClosure(pc + 1, position: position, before: c, after: following, into: &next) { return true }
            }
            steps += current.count
            // A new thread starts at every position (an unanchored search), unless the pattern is anchored.
            if !program.anchoredAtStart,
               addClosure(0, position: position, before: c, after: following, into: &next) { return true }
            swap(&current, &next)
            if current.isEmpty && program.anchoredAtStart { return false }
            at = following
            if steps >= 1024 {
                try budget?.charge(steps)
                steps = 0
            }
        }
        try budget?.charge(steps)
        return false
    }
}

/// Emits instructions for an AST, failing as soon as the program outgrows its limit (so a nested
/// repetition like `((a{1000}){1000}){1000}` is refused without building it).
private struct RegexCompiler {
    var instructions: [RegexInstruction] = []
    var sets: [ScalarSet] = []

    mutating func append(_ i: RegexInstruction) {
        instructions.append(i)
    }

    mutating func emit(_ node: RegexNode) throws(RegexSyntaxError) {
        guard instructions.count <= RegexProgram.maxInstructions else {
            throw RegexSyntaxError(message: "pattern compiles to more than \(RegexProgram.maxInstructions) instructions (reduce repetition counts)", offset: 0)
        }
        switch node {
        case .empty:
            break
        case .scalar(let s):
            append(.scalar(s))
        case .anyButNewline:
            append(.anyButNewline)
        case .set(let s):
            sets.append(s)
            append(.set(sets.count - 1))
        case .assertion(let a):
            append(.assert(a))
        case .concat(let items):
            for item in items { try emit(item) }
        case .alternation(let branches):
            // split L1, next; L1: branch 1; jump end; next: split L2, … ; last branch; end:
            var jumps: [Int] = []
            for (k, branch) in branches.enumerated() {
                if k < branches.count - 1 {
                    let split = instructions.count
                    append(.split(split + 1, -1))
                    try emit(branch)
                    jumps.append(instructions.count)
                    append(.jump(-1))
                    instructions[split] = .split(split + 1, instructions.count)
                } else {
                    try emit(branch)
                }
            }
            for j in jumps { instructions[j] = .jump(instructions.count) }
        case .repeatNode(let inner, let min, let max):
            for _ in 0..<min { try emit(inner) }
            if let max {
                // Each optional copy: split body, after.
                for _ in min..<max {
                    let split = instructions.count
                    append(.split(split + 1, -1))
                    try emit(inner)
                    instructions[split] = .split(split + 1, instructions.count)
                }
            } else {
                // loop: split body, after; body; jump loop
                let loop = instructions.count
                append(.split(loop + 1, -1))
                try emit(inner)
                append(.jump(loop))
                instructions[loop] = .split(loop + 1, instructions.count)
            }
        }
    }
}

/// `regexp_like`'s compiled patterns, by the pattern's bytes (not `String` equality, under which
/// canonically equivalent patterns, which match different scalars, would share an entry).
enum RegexCache {
    static let capacity = 256
    private static let programs = Mutex<[[UInt8]: RegexProgram]>([:])

    static func program(for pattern: String) throws(RegexSyntaxError) -> RegexProgram {
        let key = Array(pattern.utf8)
        if let hit = programs.withLock({ $0[key] }) { return hit }
        let program = try RegexProgram.compile(pattern)
        programs.withLock { cache in
            if cache.count >= capacity { cache.removeAll() }
            cache[key] = program
        }
        return program
    }
}
