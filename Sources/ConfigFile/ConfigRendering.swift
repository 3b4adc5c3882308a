/// The texts made from a list of options: `config print` and the reference in docs/OPERATIONS.md.
public enum ConfigRendering {
    /// The effective configuration as YAML that `--config` would read back (secrets aside), each
    /// value followed by where it came from; secrets are replaced by `***`.
    /// `redactURL` hides the credentials of a URL (user-info password, tokens).
    public static func effective(_ layers: ConfigLayers, header: String, redactURL: (String) -> String) -> String {
        var out = header.split(separator: "\n", omittingEmptySubsequences: false).map { "# \($0)\n" }.joined()
        for setting in layers.settings {
            let option = setting.option
            let shown = setting.values.map { redact($0, option.secrecy, redactURL: redactURL) }
            let source = "  # \(setting.source)"
            if option.repeating {
                if shown.isEmpty {
                    out += "\(option.name): []\(source)\n"
                } else {
                    out += "\(option.name):\(source)\n" + shown.map { "  - \(yaml($0, option.kind))\n" }.joined()
                }
            } else {
                out += "\(option.name): \(shown.first.map { yaml($0, option.kind) } ?? "~")\(source)\n"
            }
        }
        return out
    }

    /// A Markdown table of every option: key, environment variable, type, default, meaning.
    public static func referenceTable(_ options: [ConfigOption]) -> String {
        var out = "| Key | Environment | Type | Default | Meaning |\n|---|---|---|---|---|\n"
        for option in options {
            let environment = option.environment.map { "`\($0)`" }.joined(separator: ", ")
            let type = option.expected + (option.secrecy == .none ? "" : ", secret")
            let defaultValue = option.defaultValue.map { "`\($0)`" } ?? ""
            out += "| `\(option.name)` | \(environment) | \(cell(type)) | \(cell(defaultValue)) | \(cell(option.help)) |\n"
        }
        return out
    }

    static func redact(_ value: String, _ secrecy: ConfigOption.Secrecy, redactURL: (String) -> String) -> String {
        switch secrecy {
        case .none: return value
        case .whole: return "***"
        case .url:
            // `NAME=URL` (an auth webhook): the name is no secret.
            if !value.contains("://") { return redactURL(value) }
            if let equals = value.firstIndex(of: "="), let scheme = value.firstRange(of: "://"), equals < scheme.lowerBound {
                return String(value[...equals]) + redactQuery(redactURL(String(value[value.index(after: equals)...])))
            }
            return redactQuery(redactURL(value))
        }
    }

    /// Query parameters other than these few of libpq's can carry tokens: their values become `***`.
    private static let harmlessParameters: Set<String> = ["sslmode", "connect_timeout", "application_name", "target_session_attrs", "sslrootcert"]

    static func redactQuery(_ url: String) -> String {
        guard let question = url.firstIndex(of: "?") else { return url }
        let fragmentStart = url[question...].firstIndex(of: "#") ?? url.endIndex
        let parameters = url[url.index(after: question)..<fragmentStart].split(separator: "&", omittingEmptySubsequences: false).map { parameter in
            guard let equals = parameter.firstIndex(of: "=") else { return String(parameter) }
            let name = parameter[..<equals]
            return harmlessParameters.contains(String(name)) ? String(parameter) : "\(name)=***"
        }
        return String(url[...question]) + parameters.joined(separator: "&")
    }

    /// A YAML scalar: integers and flags bare, text double-quoted (JSON escapes are YAML's too).
    static func yaml(_ value: String, _ kind: ConfigOption.Kind) -> String {
        switch kind {
        case .flag, .integer: return value
        case .text, .choice: break
        }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    private static func cell(_ text: String) -> String {
        String(text.flatMap { $0 == "|" ? ["\\", "|"] : $0 == "\n" ? [" "] : [$0] })
    }
}
