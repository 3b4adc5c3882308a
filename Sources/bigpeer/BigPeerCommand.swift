import ArgumentParser
import CBuildInfo
import ConfigFile
import SyncProtocol

@main
struct BigPeerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bigpeer",
        abstract: "BigPeer: the big peer of an offline-first, peer-to-peer document database.",
        subcommands: [ServeCommand.self, MigrateCommand.self, KeysCommand.self, TokenCommand.self, PeerCommand.self, LANCommand.self, BenchCommand.self, VersionCommand.self, MetricsCommand.self, ConfigCommand.self])

    /// `serve`, `migrate`, `keys` and `peer` also take their options from a configuration file and the environment.
    static func main() async {
        await main(LayeredCommandLine.arguments(Array(CommandLine.arguments.dropFirst()), environment: LayeredCommandLine.currentEnvironment()))
    }
}

struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version",
                                                    abstract: "Print the version, the commit and date of the build, and the protocol versions.")
    func run() {
        print("bigpeer \(BigPeerVersion.string)")
        print("commit: \(BigPeerVersion.commit)")
        print("built: \(BigPeerVersion.buildDate)")
        print("sync protocol: \(SyncProtocol.version)")
        print("HTTP API: v4")
    }
}

enum BigPeerVersion {
    static let string = "0.1.0"
    /// Set by release builds (scripts/package-deb.sh, the Dockerfile); "unknown" otherwise.
    static let commit = String(cString: bigpeer_build_commit())
    static let buildDate = String(cString: bigpeer_build_date())
}

/// Options every command that touches the database shares.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("config"), help: "YAML file of options, each key a long option name (docs/OPERATIONS.md, \"Configuration\"); BIGPEER_<OPTION> variables override it, options given here override both (default: $BIGPEER_CONFIG).")
    var configFile: String?

    @Option(name: .customLong("database-url"), help: "PostgreSQL URL (default: $DATABASE_URL, else a private cluster under --data-dir).")
    var databaseURL: String?

    @Option(name: .customLong("data-dir"), help: "Directory for BigPeer's local state and private PostgreSQL cluster.")
    var dataDirectory = "./.bigpeer"

    @Option(name: .customLong("migrations-dir"), help: "Directory of NNNN_name.sql migrations to apply instead of the ones built into this binary (also $BIGPEER_MIGRATIONS).")
    var migrationsDirectory: String?
}
