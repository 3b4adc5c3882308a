/// Why a configuration could not be used; `description` is what the operator reads, starting
/// with where the problem is (`PATH:LINE:` or the variable's name).
public enum ConfigError: Error, Equatable, CustomStringConvertible {
    case unreadable(path: String, reason: String)
    case tooLarge(path: String, limit: Int)
    /// A NUL byte or bytes that are not UTF-8: not a text file.
    case notText(path: String, line: Int, reason: String)
    /// `*name`: YAML aliases can multiply a small file into a huge tree ("billion laughs"); a
    /// configuration has no use for them.
    case alias(path: String, line: Int, column: Int)
    /// What the YAML parser reported (its message carries the line and column).
    case syntax(path: String, message: String)
    case notAMapping(path: String, line: Int)
    case unknownKey(path: String, line: Int, key: String, suggestion: String?)
    case wrongType(path: String, line: Int, key: String, expected: String, found: String)
    case badEnvironment(variable: String, expected: String, found: String)

    public var description: String {
        switch self {
        case .unreadable(let path, let reason):
            "\(path): cannot read the configuration file: \(reason)"
        case .tooLarge(let path, let limit):
            "\(path): larger than \(limit) bytes: not a configuration file"
        case .notText(let path, let line, let reason):
            "\(path):\(line): \(reason): not a text configuration file"
        case .alias(let path, let line, let column):
            "\(path):\(line):\(column): YAML aliases (*name) are not allowed in a configuration file; write the value out (quote a value that starts with *)"
        case .syntax(let path, let message):
            "\(path): not valid YAML: \(message)"
        case .notAMapping(let path, let line):
            "\(path):\(line): the file must be a mapping of option names to values (key: value)"
        case .unknownKey(let path, let line, let key, let suggestion):
            "\(path):\(line): unknown key '\(key)'" + (suggestion.map { " (did you mean '\($0)'?)" } ?? "")
        case .wrongType(let path, let line, let key, let expected, let found):
            "\(path):\(line): '\(key)' must be \(expected), not \(found)"
        case .badEnvironment(let variable, let expected, let found):
            "\(variable) must be \(expected), not \(found)"
        }
    }
}

/// The candidate closest to `word` by edit distance, if it is close enough to be a typo.
func closest(to word: String, among candidates: some Sequence<String>) -> String? {
    let w = Array(word.lowercased().utf8)
    var best: (String, Int)?
    for candidate in candidates {
        let d = editDistance(w, Array(candidate.lowercased().utf8))
        if d < (best?.1 ?? Int.max) { best = (candidate, d) }
    }
    guard let best, best.1 <= max(2, w.count / 3) else { return nil }
    return best.0
}

/// Levenshtein distance (configuration keys are short: the quadratic table is a few hundred cells).
func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
    if a.isEmpty { return b.count }
    var previous = Array(0...b.count)
    var current = previous
    for i in 1...a.count {
        current[0] = i
        for j in stride(from: 1, through: b.count, by: 1) {
            current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}
