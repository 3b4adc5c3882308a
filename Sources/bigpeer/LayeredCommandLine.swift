import ArgumentParser
import ConfigFile
import Glibc
import Synchronization

/// `serve`, `migrate` and `keys` read their options from a configuration file (`--config FILE`, else
/// `$BIGPEER_CONFIG`), then from `BIGPEER_<OPTION>` variables, then from the command line, each
/// overriding the one before; `peer` the same from its own file (`--config`, else
/// `$BIGPEER_PEER_CONFIG`) and `BIGPEER_PEER_<OPTION>` variables (`ConfigScheme`). Before
/// ArgumentParser runs, the options the command line does not give are appended to it from the
/// environment or the file, so the commands parse and validate one command line as they always have.
enum LayeredCommandLine {
    /// The commands that take `--config`, by the words that name them, with the scheme of their file.
    static let commands: [[String]: (command: any ParsableCommand.Type, scheme: ConfigScheme)] = [
        ["serve"]: (ServeCommand.self, .serve), ["migrate"]: (MigrateCommand.self, .serve),
        ["keys", "create"]: (CreateKey.self, .serve), ["keys", "list"]: (ListKeys.self, .serve), ["keys", "revoke"]: (RevokeKey.self, .serve),
        ["peer"]: (PeerCommand.self, .peer),
    ]

    /// `arguments` (without the program name) with what the file and the environment add.
    /// Exits with status 1 when the file or a variable is not usable.
    static func arguments(_ arguments: [String], environment: [String: String]) -> [String] {
        guard let match = commands.first(where: { arguments.starts(with: $0.key) }) else { return arguments }
        let command = match.value.command
        let own = Array(arguments.dropFirst(match.key.count))
        // Help must work even when the configuration does not.
        if own.contains(where: { ["-h", "--help", "-help", "--experimental-dump-help"].contains($0) }) { return arguments }
        do {
            let layers = try resolve(command, match.value.scheme, commandLine: own, environment: environment)
            // `serve` logs them once its logging is set up (in its format: a JSON log stays JSON).
            if command == ServeCommand.self {
                pendingWarnings.withLock { $0 += layers.warnings }
            } else {
                for warning in layers.warnings { standardError("warning: " + warning) }
            }
            // Before a `--` (after it everything is an argument, not an option).
            let end = arguments.firstIndex(of: "--") ?? arguments.endIndex
            return Array(arguments[..<end]) + layers.addedArguments + Array(arguments[end...])
        } catch {
            standardError("error: \(error)")
            exit(1)
        }
    }

    /// Warnings about the configuration that `serve` logs when its logging is up (`takeWarnings`).
    private static let pendingWarnings = Mutex<[String]>([])

    static func takeWarnings() -> [String] { pendingWarnings.withLock { w in defer { w = [] }; return w } }

    /// The layers of `command`'s options. The file may set any option of its scheme (one file of
    /// `serve` serves `migrate` and `keys` too); `command` takes the ones it has.
    static func resolve(_ command: any ParsableCommand.Type, _ scheme: ConfigScheme = .serve, commandLine: [String], environment: [String: String],
                        file explicitFile: String? = nil) throws(ConfigError) -> ConfigLayers {
        let path = explicitFile ?? configPath(in: commandLine) ?? environment[scheme.fileVariable].flatMap { $0.isEmpty ? nil : $0 }
        let document = try path.map { path throws(ConfigError) in try ConfigDocument.load(path: path, options: scheme.options) }
        // Another command's own options (`keys create --description`) are not settings of the file.
        let options = scheme.settings(of: command)
        return try ConfigLayers.resolve(options: options, file: document, environment: environment, commandLine: commandLine,
                                        otherVariables: ConfigScheme.knownVariables)
    }

    /// The value of `--config FILE` or `--config=FILE`.
    static func configPath(in arguments: [String]) -> String? {
        var found: String?
        var i = 0
        while i < arguments.count && arguments[i] != "--" {
            if arguments[i] == "--config", i + 1 < arguments.count {
                found = arguments[i + 1]
                i += 1
            } else if arguments[i].hasPrefix("--config=") {
                found = String(arguments[i].dropFirst("--config=".count))
            }
            i += 1
        }
        return found
    }

    /// The process's environment.
    static func currentEnvironment() -> [String: String] {
        var result: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            entry += 1
        }
        return result
    }

    static func standardError(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }
}
