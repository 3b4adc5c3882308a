/// The effective configuration of one command: each option from the command line if it was given
/// there, else from its environment variable, else from the file, else its default.
public struct ConfigLayers: Sendable {
    public struct Setting: Sendable, Equatable {
        public var option: ConfigOption
        /// Empty for an unset option without a default (and for an empty list).
        public var values: [String]
        public var source: ConfigSource
    }

    public var settings: [Setting]
    /// `BIGPEER_*` variables no option and nothing else reads: probably typos (reported, never fatal).
    public var warnings: [String]

    /// Resolves `options`. `commandLine` is the command's own arguments (after its name); it is
    /// only read for which options it gives, the command's parser reads it as before.
    /// `otherVariables` are `BIGPEER_*` variables read elsewhere (no warning for them).
    public static func resolve(options: [ConfigOption], file: ConfigDocument?, environment: [String: String], commandLine: [String],
                               otherVariables: Set<String> = []) throws(ConfigError) -> ConfigLayers {
        let given = CommandLineScan(options: options, arguments: commandLine)
        var settings: [Setting] = []
        for option in options {
            if let values = given.values[option.name] {
                settings.append(Setting(option: option, values: values, source: .commandLine))
            } else if let variable = option.environment.first(where: { !(environment[$0] ?? "").isEmpty }), let text = environment[variable] {
                settings.append(Setting(option: option, values: try environmentValues(text, variable: variable, option: option), source: .environment(variable)))
            } else if let file, let entry = file.entries[option.name] {
                settings.append(Setting(option: option, values: entry.values, source: .file(path: file.path, line: entry.line)))
            } else {
                settings.append(Setting(option: option, values: option.defaultValue.map { [$0] } ?? [], source: .defaultValue))
            }
        }
        let known = Set(options.flatMap(\.environment)).union(otherVariables)
        let unknown = environment.keys.filter { $0.hasPrefix("BIGPEER_") && !known.contains($0) }.sorted()
        let warnings = unknown.map { name in
            "\(name) is set but no option reads it" + (closest(to: name, among: known.sorted()).map { " (did you mean \($0)?)" } ?? "")
        }
        return ConfigLayers(settings: settings, warnings: warnings)
    }

    /// What the file and the environment add to the command line, as `--name=value` (so a value
    /// starting with `-` stays a value): for the command's parser to read after what was typed.
    public var addedArguments: [String] {
        var arguments: [String] = []
        for setting in settings {
            switch setting.source {
            case .file, .environment: break
            case .commandLine, .defaultValue: continue
            }
            if setting.option.kind == .flag {
                if setting.values == ["true"] { arguments.append("--\(setting.option.name)") }
            } else {
                arguments += setting.values.map { "--\(setting.option.name)=\($0)" }
            }
        }
        return arguments
    }

    /// One value per line for a repeatable option (a comma can be part of a DQL statement).
    private static func environmentValues(_ text: String, variable: String, option: ConfigOption) throws(ConfigError) -> [String] {
        let items = option.repeating ? text.split(separator: "\n").map(String.init).filter { !$0.isEmpty } : [text]
        var values: [String] = []
        for item in items {
            var spelled = item
            if option.kind == .flag {
                if item == "1" { spelled = "true" } else if item == "0" { spelled = "false" }
            }
            guard let value = ConfigValueCheck.value(spelled, quoted: false, for: option.kind) else {
                throw .badEnvironment(variable: variable, expected: option.kind == .flag ? "true, false, 1 or 0" : option.expected, found: "\"\(item)\"")
            }
            values.append(value)
        }
        return values
    }
}

/// Which options a command line gives, and their values (`--name value`, `--name=value`, flags).
struct CommandLineScan {
    var values: [String: [String]] = [:]

    init(options: [ConfigOption], arguments: [String]) {
        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var i = 0
        while i < arguments.count {
            let argument = arguments[i]
            i += 1
            if argument == "--" { break }
            guard argument.hasPrefix("--") else { continue }
            let body = argument.dropFirst(2)
            let name = String(body.prefix { $0 != "=" })
            guard let option = byName[name] else { continue }
            if option.kind == .flag {
                values[name] = ["true"]
                continue
            }
            let value: String
            if let equals = body.firstIndex(of: "=") {
                value = String(body[body.index(after: equals)...])
            } else if i < arguments.count {
                value = arguments[i]
                i += 1
            } else {
                continue  // the parser reports the missing value
            }
            values[name] = option.repeating ? (values[name] ?? []) + [value] : [value]
        }
    }
}
