/// One option of a command as the configuration file, the environment and the command line all
/// know it: the file key is the long option name (`db-connections`), the environment variable is
/// the command's prefix (`BIGPEER_`; `BIGPEER_PEER_` for `bigpeer peer`) and the name in upper
/// case with `_` for `-` (`BIGPEER_DB_CONNECTIONS`), and the flag is `--db-connections`.
public struct ConfigOption: Sendable, Equatable {
    /// What a value must look like.
    public enum Kind: Sendable, Equatable {
        /// On or off: `true`/`false` in the file, `true|false|1|0` in the environment, present or
        /// absent on the command line.
        case flag
        /// A whole number (ranges are the command's own validation, which sees every layer).
        case integer
        /// Any text.
        case text
        /// One of these words.
        case choice([String])
    }

    /// What `config print` may show of a value.
    public enum Secrecy: Sendable, Equatable {
        case none
        /// The value is a credential: shown as `***`.
        case whole
        /// The value is (or ends in, after `NAME=`) a URL whose user-info password and query
        /// parameter values are credentials.
        case url
    }

    public var name: String
    public var kind: Kind
    /// Given more than once on the command line; a list in the file; one item per line in the environment.
    public var repeating: Bool
    /// The default as the command line would spell it; nil when the option has none.
    public var defaultValue: String?
    public var help: String
    public var secrecy: Secrecy
    /// Variables read for this option, the first wins: `<prefix><NAME>`, then older names.
    public var environment: [String]

    public init(name: String, kind: Kind, repeating: Bool = false, defaultValue: String? = nil, help: String,
                secrecy: Secrecy = .none, olderEnvironment: [String] = [], environmentPrefix: String = "BIGPEER_") {
        self.name = name
        self.kind = kind
        self.repeating = repeating
        // A flag's default is off (ArgumentParser describes none).
        self.defaultValue = defaultValue ?? (kind == .flag ? "false" : nil)
        self.help = help
        self.secrecy = secrecy
        self.environment = [Self.environmentName(name, prefix: environmentPrefix)] + olderEnvironment
    }

    public static func environmentName(_ option: String, prefix: String = "BIGPEER_") -> String {
        prefix + option.uppercased().replacingDashes()
    }

    /// What `kind` and `repeating` ask for, in words (errors and the reference).
    public var expected: String {
        let one: String
        switch kind {
        case .flag: one = "true or false"
        case .integer: one = "an integer"
        case .text: one = "a string"
        case .choice(let words): one = "one of " + words.joined(separator: ", ")
        }
        return repeating ? "a list of \(one == "a string" ? "strings" : one)" : one
    }
}

/// Where an effective value came from.
public enum ConfigSource: Sendable, Equatable, CustomStringConvertible {
    case defaultValue
    case file(path: String, line: Int)
    case environment(String)
    case commandLine

    public var description: String {
        switch self {
        case .defaultValue: "default"
        case .file(let path, let line): "file \(path):\(line)"
        case .environment(let variable): "environment \(variable)"
        case .commandLine: "command line"
        }
    }
}

extension String {
    func replacingDashes() -> String { String(map { $0 == "-" ? "_" : $0 }) }
}
