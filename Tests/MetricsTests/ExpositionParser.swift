import Metrics

/// A strict reader of the Prometheus text format (0.0.4), enough to check what we expose: every
/// sample line belongs to a family announced by `# HELP` and `# TYPE` before it, names and label
/// names are valid, label values unescape, and each histogram's buckets are cumulative with a
/// `+Inf` bucket equal to `_count`.
struct Exposition {
    struct Sample { var name: String; var labels: [String: String]; var value: Double }
    struct Failure: Error, CustomStringConvertible { let description: String }

    var types: [String: String] = [:]
    var helps: [String: String] = [:]
    var samples: [Sample] = []

    static func parse(_ text: String) throws -> Exposition {
        var e = Exposition()
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            if line.isEmpty { continue }
            if line.hasPrefix("# HELP ") {
                let rest = line.dropFirst(7)
                guard let space = rest.firstIndex(of: " ") else { throw Failure(description: "HELP without text: \(line)") }
                e.helps[String(rest[..<space])] = String(rest[rest.index(after: space)...])
            } else if line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst(7).split(separator: " ")
                guard parts.count == 2, ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[1]) else { throw Failure(description: "bad TYPE: \(line)") }
                guard e.types[String(parts[0])] == nil else { throw Failure(description: "TYPE twice: \(line)") }
                e.types[String(parts[0])] = String(parts[1])
            } else if line.hasPrefix("#") {
                continue
            } else {
                let sample = try parseSample(line)
                guard let family = e.family(of: sample.name), e.helps[family] != nil else { throw Failure(description: "sample before its HELP/TYPE: \(line)") }
                e.samples.append(sample)
            }
        }
        return e
    }

    /// The family a sample name belongs to (histograms add `_bucket`, `_sum`, `_count`).
    func family(of name: String) -> String? {
        if types[name] != nil { return name }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let base = String(name.dropLast(suffix.count))
            if types[base] == "histogram" { return base }
        }
        return nil
    }

    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    func sum(_ name: String, where match: ([String: String]) -> Bool = { _ in true }) -> Double {
        samples.filter { $0.name == name && match($0.labels) }.reduce(0) { $0 + $1.value }
    }

    /// Histogram rules: per series, `le` increasing, counts non-decreasing, `+Inf` last and equal to `_count`.
    func check() throws {
        for (family, type) in types where type == "histogram" {
            var series: [[String: String]: [(le: Double, count: Double)]] = [:]
            for s in samples where s.name == family + "_bucket" {
                guard let le = s.labels["le"] else { throw Failure(description: "bucket without le") }
                var key = s.labels
                key["le"] = nil
                series[key, default: []].append((le == "+Inf" ? .infinity : Double(le) ?? .nan, s.value))
            }
            for (labels, buckets) in series {
                guard buckets.last?.le == .infinity else { throw Failure(description: "\(family) \(labels): no +Inf bucket last") }
                for (a, b) in zip(buckets, buckets.dropFirst()) where !(a.le < b.le && a.count <= b.count) {
                    throw Failure(description: "\(family) \(labels): buckets not cumulative")
                }
                guard value(family + "_count", labels) == buckets.last?.count, value(family + "_sum", labels) != nil else {
                    throw Failure(description: "\(family) \(labels): +Inf differs from _count or no _sum")
                }
            }
        }
    }

    private static func parseSample(_ line: String) throws -> Sample {
        var it = Array(line.unicodeScalars)[...]
        var name = ""
        while let c = it.first, c != "{" && c != " " { name.unicodeScalars.append(c); it = it.dropFirst() }
        guard isName(name) else { throw Failure(description: "bad metric name: \(line)") }
        var labels: [String: String] = [:]
        if it.first == "{" {
            it = it.dropFirst()
            while it.first != "}" {
                var label = ""
                while let c = it.first, c != "=" { label.unicodeScalars.append(c); it = it.dropFirst() }
                guard isName(label), it.dropFirst().first == "\"" else { throw Failure(description: "bad label: \(line)") }
                it = it.dropFirst(2)
                var value = ""
                while let c = it.first, c != "\"" {
                    it = it.dropFirst()
                    if c == "\\" {
                        switch it.first {
                        case "\\": value += "\\"
                        case "\"": value += "\""
                        case "n": value += "\n"
                        default: throw Failure(description: "bad escape: \(line)")
                        }
                        it = it.dropFirst()
                    } else {
                        value.unicodeScalars.append(c)
                    }
                }
                guard it.first == "\"" else { throw Failure(description: "unterminated label value: \(line)") }
                it = it.dropFirst()
                guard labels.updateValue(value, forKey: label) == nil else { throw Failure(description: "label twice: \(line)") }
                if it.first == "," { it = it.dropFirst() }
            }
            it = it.dropFirst()
        }
        guard it.first == " " else { throw Failure(description: "no value: \(line)") }
        let text = String(String.UnicodeScalarView(it.dropFirst()))
        let value: Double? = text == "+Inf" ? .infinity : text == "-Inf" ? -.infinity : Double(text)
        guard let value else { throw Failure(description: "bad value: \(line)") }
        return Sample(name: name, labels: labels, value: value)
    }

    private static func isName(_ s: String) -> Bool {
        guard let f = s.unicodeScalars.first, !("0"..."9").contains(f) else { return false }
        return s.unicodeScalars.allSatisfy { $0 == "_" || $0 == ":" || ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) }
    }
}
