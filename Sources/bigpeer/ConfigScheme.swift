import ArgumentParser
import ConfigFile

/// One family of configuration: the options a file of it may set (those of one command), the
/// prefix of their variables, and the variable that names the file when `--config` does not.
/// `serve`'s file also serves `migrate` and `keys` (each takes the options it has); `peer` has
/// its own (a small peer's `--lan` or `--sync-group` are not a server's), read from
/// `BIGPEER_PEER_*` variables so one machine can run both.
struct ConfigScheme: Sendable {
    /// The command whose options a file may set, as `bigpeer config` names it.
    var command: String
    var variablePrefix: String
    var fileVariable: String
    var rows: [String: OptionRow]
    var options: [ConfigOption]

    init(_ command: any ParsableCommand.Type, name: String, variablePrefix: String, fileVariable: String, rows: [String: OptionRow]) {
        self.command = name
        self.variablePrefix = variablePrefix
        self.fileVariable = fileVariable
        self.rows = rows
        options = CommandOptions.options(of: command, rows: rows, variablePrefix: variablePrefix)
    }

    /// The options of `command` that are settings of this scheme (another command's own options,
    /// `keys create --description`, are not settings of the file or the environment).
    func settings(of command: any ParsableCommand.Type) -> [ConfigOption] {
        let names = Set(options.map(\.name))
        return CommandOptions.options(of: command, rows: rows, variablePrefix: variablePrefix).filter { names.contains($0.name) }
    }

    static let serve = ConfigScheme(ServeCommand.self, name: "serve", variablePrefix: "BIGPEER_", fileVariable: "BIGPEER_CONFIG",
                                    rows: ServeOptionTable.rows)
    static let peer = ConfigScheme(PeerCommand.self, name: "peer", variablePrefix: "BIGPEER_PEER_", fileVariable: "BIGPEER_PEER_CONFIG",
                                   rows: PeerOptionTable.rows)

    /// Every `BIGPEER_*` variable something reads: any other is reported as a probable typo.
    static let knownVariables: Set<String> = ServeOptionTable.otherVariables
        .union([serve, peer].flatMap { [$0.fileVariable] + $0.options.flatMap(\.environment) })
}
