import ArgumentParser

@main
struct BigPeerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bigpeer",
        abstract: "BigPeer: the big peer of an offline-first document database.",
        subcommands: [VersionCommand.self])
}

struct VersionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "version", abstract: "Print the version.")
    func run() { print("bigpeer 0.1.0") }
}
