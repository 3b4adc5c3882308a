import ArgumentParser
import BigPeerServer
import ConfigFile

/// `bigpeer config`: check a configuration file, print the effective configuration, print the
/// reference of every option (docs/OPERATIONS.md, "Configuration"); of `serve`, or with `--peer`
/// of `peer`.
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "The configuration file of `serve --config` (or `peer --config`) and the BIGPEER_* variables.",
        subcommands: [Check.self, Print.self, Reference.self])

    /// `--peer`: the scheme of `bigpeer peer` instead of `serve`'s.
    struct Which: ParsableArguments {
        @Flag(name: .customLong("peer"), help: "The configuration of `bigpeer peer` (BIGPEER_PEER_* variables) instead of `serve`.")
        var peer = false

        var command: any ParsableCommand.Type { peer ? PeerCommand.self : ServeCommand.self }
        var scheme: ConfigScheme { peer ? .peer : .serve }
    }

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a configuration file as `serve --config FILE` (or `peer --config FILE`) would read it.",
            discussion: "Exit status 0: the file is accepted (the environment is not consulted). 1: it is not, with the reason on standard error (an unknown key or a wrong type with its line, YAML syntax, aliases, a NUL byte, more than 1 MiB, or options that do not go together).")

        @OptionGroup var which: Which
        @Argument(help: "The YAML file.") var file: String

        func run() throws {
            do {
                let layers = try LayeredCommandLine.resolve(which.command, which.scheme, commandLine: [], environment: [:], file: file)
                try ConfigCommand.validate(which.command, layers.addedArguments, origin: file)
                let count = layers.settings.filter { if case .file = $0.source { true } else { false } }.count
                print("\(file): ok (\(count) option\(count == 1 ? "" : "s") set)")
            } catch {
                LayeredCommandLine.standardError("error: \(error)")
                throw ExitCode.failure
            }
        }
    }

    struct Print: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the configuration `serve` (or `peer`) would run with (file, then BIGPEER_* variables, then these options), with where each value comes from; secrets are shown as ***.")

        @OptionGroup var which: Which
        @Option(name: .customLong("config"), help: "The configuration file (default: $BIGPEER_CONFIG, or $BIGPEER_PEER_CONFIG with --peer; none: only variables, options and defaults).")
        var file: String?
        @Argument(parsing: .allUnrecognized, help: "Options of `serve` (or `peer`), as they would be given to it.")
        var serveArguments: [String] = []

        func run() throws {
            do {
                print(try ConfigCommand.effective(which, file: file, arguments: serveArguments, environment: LayeredCommandLine.currentEnvironment()),
                      terminator: "")
            } catch {
                LayeredCommandLine.standardError("error: \(error)")
                throw ExitCode.failure
            }
        }
    }

    struct Reference: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every option of `serve` (or `peer`) (file key, variable, type, default, meaning) as a Markdown table: the one in docs/OPERATIONS.md.")

        @OptionGroup var which: Which

        func run() {
            print(ConfigRendering.referenceTable(which.scheme.options), terminator: "")
        }
    }

    /// `config print`'s text: the effective configuration of `which` with `arguments` given on
    /// its command line, validated as the command would; secrets `***`, warnings on stderr.
    static func effective(_ which: Which, file: String?, arguments: [String], environment: [String: String]) throws -> String {
        let scheme = which.scheme
        let layers = try LayeredCommandLine.resolve(which.command, scheme, commandLine: arguments, environment: environment, file: file)
        for warning in layers.warnings { LayeredCommandLine.standardError("warning: " + warning) }
        try validate(which.command, arguments + layers.addedArguments, origin: "the effective configuration")
        let header = "bigpeer \(scheme.command): effective configuration (file, then \(scheme.variablePrefix)* variables, then options; secrets shown as ***)"
        return ConfigRendering.effective(layers, header: header, redactURL: LogRedaction.redact)
    }

    /// Runs `serve`'s own validation (ranges, options that need or exclude each other).
    static func validateServe(_ arguments: [String], origin: String) throws(ServeValidationError) {
        try validate(ServeCommand.self, arguments, origin: origin)
    }

    /// Runs `command`'s own validation (ranges, options that need or exclude each other).
    static func validate(_ command: any ParsableCommand.Type, _ arguments: [String], origin: String) throws(ServeValidationError) {
        do {
            _ = try command.parse(arguments)
        } catch {
            throw ServeValidationError(origin: origin, message: command.message(for: error))
        }
    }
}

struct ServeValidationError: Error, CustomStringConvertible {
    var origin: String
    var message: String
    var description: String { "\(origin): \(message)" }
}
