@testable import bigpeer
import ArgumentParser
import BigPeerTestSupport
import ConfigFile
import Glibc
import Testing

/// The configuration layers over `bigpeer peer`'s real options: its own file (`--config`, else
/// `$BIGPEER_PEER_CONFIG`), then `BIGPEER_PEER_<OPTION>` variables, then the command line.
@Suite struct PeerConfigurationTests {
    @Test func theTableTypesEveryOptionOfPeerAndNoOther() {
        let declared = Set(CommandOptions.peer.map(\.name))
        #expect(declared.count > 25)
        #expect(declared == Set(PeerOptionTable.rows.keys), "add a row to PeerOptionTable for each new option of peer")
        ServeConfigurationTests.expectRowsType(CommandOptions.peer, PeerOptionTable.rows)
        for option in CommandOptions.peer {
            #expect(option.environment == ["BIGPEER_PEER_" + option.name.uppercased().replacingOccurrences(of: "-", with: "_")])
        }
        for secret in ["key", "jwt", "token"] { #expect(CommandOptions.peer.first { $0.name == secret }?.secrecy == .whole, "\(secret)") }
        #expect(CommandOptions.peer.first { $0.name == "subscribe" }?.repeating == true)
        // One machine may run a server and a peer: no variable of one is read by the other.
        let serveVariables = Set(CommandOptions.serve.flatMap(\.environment))
        #expect(serveVariables.isDisjoint(with: CommandOptions.peer.flatMap(\.environment)))
    }

    /// docs/OPERATIONS.md's table of `peer`'s options is `bigpeer config reference --peer`'s output.
    @Test func operationsDocReferenceMatchesTheOptions() throws {
        try ServeConfigurationTests.expectDocumentedTable("peer-config-reference", command: "bigpeer config reference --peer", CommandOptions.peer)
    }

    func parsePeer(file: String?, environment: [String: String] = [:], commandLine: [String] = [], viaVariable: Bool = false) throws -> PeerCommand {
        var arguments = ["peer"] + commandLine
        var environment = environment
        let path = file.map { ServeConfigurationTests.writeTemporary($0) }
        defer { if let path { unlink(path) } }
        if let path {
            if viaVariable { environment["BIGPEER_PEER_CONFIG"] = path } else { arguments += ["--config", path] }
        }
        let merged = LayeredCommandLine.arguments(arguments, environment: environment)
        return try PeerCommand.parse(Array(merged.dropFirst()))
    }

    static let file = """
        data: /tmp/peer-store
        url: ws://node.example:8080
        key: bpk_0123456789abcdef_s3cret
        subscribe:
          - SELECT * FROM cars
          - SELECT * FROM notes WHERE owner = 'me'
        sync-once: true
        timeout: 60
        """

    @Test func fileThenEnvironmentThenFlagsReachTheCommand() throws {
        let fromFile = try parsePeer(file: Self.file)
        #expect(fromFile.dataDirectory == "/tmp/peer-store" && fromFile.url == "ws://node.example:8080")
        #expect(fromFile.key == "bpk_0123456789abcdef_s3cret" && fromFile.syncOnce && fromFile.timeout == 60)
        #expect(fromFile.subscriptions == ["SELECT * FROM cars", "SELECT * FROM notes WHERE owner = 'me'"])
        #expect(try parsePeer(file: Self.file, viaVariable: true).timeout == 60, "$BIGPEER_PEER_CONFIG names the file")

        // serve's variables are not peer's: BIGPEER_NAME is no setting of the peer.
        let overridden = try parsePeer(file: Self.file, environment: ["BIGPEER_PEER_TIMEOUT": "90", "BIGPEER_PEER_NAME": "tablet", "BIGPEER_NAME": "x"],
                                       commandLine: ["--timeout", "120", "--subscribe", "SELECT * FROM trucks"])
        #expect(overridden.timeout == 120)
        #expect(overridden.name == "tablet")
        #expect(overridden.subscriptions == ["SELECT * FROM trucks"])
        #expect(overridden.url == "ws://node.example:8080")
    }

    @Test func peerValidationSeesTheMergedValues() {
        // --key from the file and --jwt from the environment exclude each other.
        #expect(throws: (any Error).self) { try parsePeer(file: Self.file, environment: ["BIGPEER_PEER_JWT": "a.b.c"]) }
        #expect(throws: (any Error).self) { try parsePeer(file: "data: /tmp/p\nsync-once: true\noffline: true\n") }
    }

    @Test func printHidesTheCredentials() throws {
        let path = ServeConfigurationTests.writeTemporary(Self.file)
        defer { unlink(path) }
        let which = try ConfigCommand.Which.parse(["--peer"])
        let text = try ConfigCommand.effective(which, file: path, arguments: ["--url", "wss://node.example/api/v4/sync?token=t0ps3cret"], environment: [:])
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("# bigpeer peer: effective configuration (file, then BIGPEER_PEER_* variables") == true, "\(text)")
        #expect(lines.contains("key: \"***\"  # file \(path):3"), "\(text)")
        #expect(lines.contains("url: \"wss://node.example/api/v4/sync?token=***\"  # command line"), "\(text)")
        #expect(lines.contains("timeout: 60  # file \(path):8"), "\(text)")
        #expect(!text.contains("s3cret") && !text.contains("t0ps3cret"))
    }
}
