/// Collects samples for declared families and renders the Prometheus text exposition format
/// (version 0.0.4): for each family `# HELP`, `# TYPE`, then its samples, families in declaration
/// order. Runs at scrape time only; nothing here is on a request path.
public struct ExpositionWriter {
    private let families: [MetricFamily]
    private var lines: [String: String] = [:]

    public init(families: [MetricFamily]) {
        self.families = families
    }

    /// A counter or gauge sample; `labels` are the values of `family.labels`, in order.
    public mutating func sample(_ family: MetricFamily, labels: [String] = [], _ value: Double) {
        append(family, suffix: "", labels: labels, extra: nil, Self.format(value))
    }

    public mutating func sample(_ family: MetricFamily, labels: [String] = [], _ value: UInt64) {
        append(family, suffix: "", labels: labels, extra: nil, String(value))
    }

    public mutating func sample(_ family: MetricFamily, labels: [String] = [], _ value: Int) {
        append(family, suffix: "", labels: labels, extra: nil, String(value))
    }

    /// A histogram series from per-bucket counts (`+Inf` last, not cumulative) and the sum in the
    /// buckets' units; writes cumulative `_bucket` lines, `_sum` and `_count`.
    public mutating func histogram(_ family: MetricFamily, labels: [String] = [], buckets: HistogramBuckets, counts: [UInt64], sum: UInt64) {
        precondition(family.type == .histogram && counts.count == buckets.bounds.count + 1)
        var cumulative: UInt64 = 0
        for (i, count) in counts.enumerated() {
            cumulative &+= count
            let le = i < buckets.bounds.count ? Self.format(Double(buckets.bounds[i]) / buckets.unitsPerValue) : "+Inf"
            append(family, suffix: "_bucket", labels: labels, extra: le, String(cumulative))
        }
        append(family, suffix: "_sum", labels: labels, extra: nil, Self.format(Double(sum) / buckets.unitsPerValue))
        append(family, suffix: "_count", labels: labels, extra: nil, String(cumulative))
    }

    private mutating func append(_ family: MetricFamily, suffix: String, labels: [String], extra le: String?, _ value: String) {
        precondition(labels.count == family.labels.count, "\(family.name): \(labels.count) label values for \(family.labels.count) labels")
        var line = family.name + suffix
        if !labels.isEmpty || le != nil {
            line += "{"
            var first = true
            for (name, value) in zip(family.labels, labels) {
                if !first { line += "," }
                first = false
                line += name + "=\"" + Self.escapeLabelValue(value) + "\""
            }
            if let le { line += (first ? "" : ",") + "le=\"" + le + "\"" }
            line += "}"
        }
        line += " " + value + "\n"
        lines[family.name, default: ""] += line
    }

    /// The exposition text: every declared family's HELP and TYPE, then its samples.
    public func render() -> String {
        var out = ""
        for f in families {
            out += "# HELP \(f.name) \(Self.escapeHelp(f.help))\n# TYPE \(f.name) \(f.type.rawValue)\n"
            out += lines[f.name] ?? ""
        }
        return out
    }

    /// Label values escape `\`, `"` and line feed; HELP text `\` and line feed (the format's only
    /// escapes).
    static func escapeLabelValue(_ s: String) -> String { escape(s, quote: true) }
    static func escapeHelp(_ s: String) -> String { escape(s, quote: false) }

    private static func escape(_ s: String, quote: Bool) -> String {
        guard s.utf8.contains(where: { $0 == 0x5C || $0 == 0x0A || (quote && $0 == 0x22) }) else { return s }
        var out = ""
        for c in s.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\"" where quote: out += "\\\""
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}
