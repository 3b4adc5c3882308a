import ArgumentParser
import ConfigFile
import Values

/// The options of a command as the configuration layers see them: read from ArgumentParser's
/// own description of the command (the JSON of `--experimental-dump-help`), so the name, default
/// and help are the declaration's, and typed by the command's table of `OptionRow`s.
enum CommandOptions {
    /// Options that are about the command line itself, not settings.
    static let notSettings: Set<String> = ["help", "version", "config", "experimental-dump-help"]

    static func options(of command: any ParsableCommand.Type, rows: [String: OptionRow], variablePrefix: String) -> [ConfigOption] {
        guard let info = try? JSON.parse(command._dumpHelp()), let arguments = info["command"]?["arguments"]?.arrayValue else { return [] }
        return arguments.compactMap { argument -> ConfigOption? in
            let kind = argument["kind"]?.stringValue
            guard kind == "option" || kind == "flag",
                  let name = argument["names"]?.arrayValue?.first(where: { $0["kind"]?.stringValue == "long" })?["name"]?.stringValue,
                  !notSettings.contains(name) else { return nil }
            let words = argument["allValues"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let row = rows[name]
            let valueKind: ConfigOption.Kind
            if kind == "flag" {
                valueKind = .flag
            } else if row?.kind == .integer {
                valueKind = .integer
            } else if !words.isEmpty && (row == nil || row?.kind == .choice) {
                valueKind = .choice(words)
            } else {
                valueKind = .text
            }
            return ConfigOption(name: name, kind: valueKind, repeating: argument["isRepeating"]?.boolValue ?? false,
                                defaultValue: argument["defaultValue"]?.stringValue, help: argument["abstract"]?.stringValue ?? "",
                                secrecy: row?.secrecy ?? .none, olderEnvironment: row?.olderEnvironment ?? [], environmentPrefix: variablePrefix)
        }
    }

    /// Every option `serve` takes: what its configuration file may set.
    static var serve: [ConfigOption] { ConfigScheme.serve.options }
    /// Every option `peer` takes: what its configuration file may set.
    static var peer: [ConfigOption] { ConfigScheme.peer.options }
}
