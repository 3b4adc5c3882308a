import ArgumentParser
import BigPeerServer
import Metrics

struct MetricsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "About the metrics `serve --metrics-port` exposes.",
        subcommands: [List.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print every metric (name, type, labels, meaning) as a Markdown table: the one in docs/OPERATIONS.md.")

        func run() {
            print(ServiceMetrics.all.markdownTable(), terminator: "")
        }
    }
}
