/// The Prometheus metric types this registry exposes.
public enum MetricType: String, Sendable {
    case counter, gauge, histogram
}

/// A metric's declaration: what `# HELP`/`# TYPE` say and which labels its samples carry. Every
/// family is declared up front (a static list per owner), so the exposed set is known without a
/// running server (`bigpeer metrics list`, the table in docs/OPERATIONS.md).
public struct MetricFamily: Sendable, Hashable {
    public let name: String
    public let type: MetricType
    public let help: String
    public let labels: [String]

    public init(_ name: String, _ type: MetricType, _ help: String, labels: [String] = []) {
        precondition(Self.isValidName(name) && labels.allSatisfy(Self.isValidName), "invalid metric or label name \(name)")
        self.name = name
        self.type = type
        self.help = help
        self.labels = labels
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` (labels may not use `:`; none here do).
    static func isValidName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !(0x30...0x39).contains(first) else { return false }
        return name.utf8.allSatisfy { $0 == 0x5F || $0 == 0x3A || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) }
    }
}

extension [MetricFamily] {
    /// A Markdown table of the families (name, type, labels, meaning): docs/OPERATIONS.md holds
    /// this text, and a test checks it matches.
    public func markdownTable() -> String {
        var out = "| Name | Type | Labels | Meaning |\n|---|---|---|---|\n"
        for f in self {
            let labels = f.labels.isEmpty ? "" : f.labels.map { "`\($0)`" }.joined(separator: ", ")
            out += "| `\(f.name)` | \(f.type.rawValue) | \(labels) | \(f.help.split(separator: "|", omittingEmptySubsequences: false).joined(separator: "\\|")) |\n"
        }
        return out
    }
}
