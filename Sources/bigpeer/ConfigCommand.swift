import ArgumentParser
import BigPeerServer
import ConfigFile

/// `bigpeer config`: check a configuration file, print the effective configuration, print the
/// reference of every option (docs/OPERATIONS.md, "Configuration").
struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "The configuration file of `serve --config` and the BIGPEER_* variables.",
        subcommands: [Check.self, Print.self, Reference.self])

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check a configuration file as `serve --config FILE` would read it.",
            discussion: "Exit status 0: the file is accepted (the environment is not consulted). 1: it is not, with the reason on standard error (an unknown key or a wrong type with its line, YAML syntax, aliases, a NUL byte, more than 1 MiB, or options that do not go together).")

        @Argument(help: "The YAML file.") var file: String

        func run() throws {
            do {
                let layers = try LayeredCommandLine.resolve(ServeCommand.self, commandLine: [], environment: [:], file: file)
                try ConfigCommand.validateServe(layers.addedArguments, origin: file)
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
            abstract: "Print the configuration `serve` would run with (file, then BIGPEER_* variables, then these options), with where each value comes from; secrets are shown as ***.")

        @Option(name: .customLong("config"), help: "The configuration file (default: $BIGPEER_CONFIG; none: only variables, options and defaults).")
        var file: String?
        @Argument(parsing: .allUnrecognized, help: "Options of `serve`, as they would be given to it.")
        var serveArguments: [String] = []

        func run() throws {
            do {
                let layers = try LayeredCommandLine.resolve(ServeCommand.self, commandLine: serveArguments,
                                                            environment: LayeredCommandLine.currentEnvironment(), file: file)
                for warning in layers.warnings { LayeredCommandLine.standardError("warning: " + warning) }
                try ConfigCommand.validateServe(serveArguments + layers.addedArguments, origin: "the effective configuration")
                let header = "bigpeer serve: effective configuration (file, then BIGPEER_* variables, then options; secrets shown as ***)"
                print(ConfigRendering.effective(layers, header: header, redactURL: LogRedaction.redact), terminator: "")
            } catch {
                LayeredCommandLine.standardError("error: \(error)")
                throw ExitCode.failure
            }
        }
    }

    struct Reference: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every option of `serve` (file key, variable, type, default, meaning) as a Markdown table: the one in docs/OPERATIONS.md.")

        func run() {
            print(ConfigRendering.referenceTable(CommandOptions.serve), terminator: "")
        }
    }

    /// Runs `serve`'s own validation (ranges, options that need or exclude each other).
    static func validateServe(_ arguments: [String], origin: String) throws(ServeValidationError) {
        do {
            _ = try ServeCommand.parse(arguments)
        } catch {
            throw ServeValidationError(origin: origin, message: ServeCommand.message(for: error))
        }
    }
}

struct ServeValidationError: Error, CustomStringConvertible {
    var origin: String
    var message: String
    var description: String { "\(origin): \(message)" }
}
