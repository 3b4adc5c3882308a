@testable import bigpeer
import ArgumentParser
import ConfigFile
import Glibc
import Logging
import Sockets
import Testing

/// The configuration layers over `bigpeer serve`'s real options.
@Suite struct ServeConfigurationTests {
    static let root = "/" + "\(#filePath)".split(separator: "/").dropLast(3).joined(separator: "/")

    @Test func theTableTypesEveryOptionOfServeAndNoOther() {
        let declared = Set(CommandOptions.serve.map(\.name))
        #expect(declared.count > 60)
        #expect(declared == Set(ServeOptionTable.rows.keys), "add a row to ServeOptionTable for each new option of serve")
        Self.expectRowsType(CommandOptions.serve, ServeOptionTable.rows)
        #expect(CommandOptions.serve.first { $0.name == "port" }?.defaultValue == "8080")
        #expect(CommandOptions.serve.first { $0.name == "auth-webhook" }?.repeating == true)
        #expect(CommandOptions.serve.first { $0.name == "database-url" }?.environment == ["BIGPEER_DATABASE_URL", "DATABASE_URL"])
    }

    /// Each option's row gives the kind its declaration has.
    static func expectRowsType(_ options: [ConfigOption], _ rows: [String: OptionRow]) {
        for option in options {
            let row = rows[option.name]
            switch option.kind {
            case .flag: #expect(row?.kind == .flag, "\(option.name) is a flag")
            case .choice(let words): #expect(row?.kind == .choice && !words.isEmpty, "\(option.name)")
            case .integer: #expect(row?.kind == .integer, "\(option.name)")
            case .text: #expect(row?.kind == .text, "\(option.name) is declared as text")
            }
        }
    }

    /// docs/OPERATIONS.md's reference is `bigpeer config reference`'s output: regenerate it when an option changes.
    @Test func operationsDocReferenceMatchesTheOptions() throws {
        try Self.expectDocumentedTable("config-reference", command: "bigpeer config reference", CommandOptions.serve)
    }

    /// The table between `<!-- MARKER:begin (COMMAND) -->` and `<!-- MARKER:end -->` in
    /// docs/OPERATIONS.md is `ConfigRendering.referenceTable(options)`.
    static func expectDocumentedTable(_ marker: String, command: String, _ options: [ConfigOption]) throws {
        let doc = try #require(FileBytes.read(root + "/docs/OPERATIONS.md").map { String(decoding: $0, as: UTF8.self) })
        let start = try #require(doc.firstRange(of: "<!-- \(marker):begin (\(command)) -->\n")?.upperBound)
        let stop = try #require(doc.firstRange(of: "<!-- \(marker):end -->")?.lowerBound)
        #expect(String(doc[start..<stop]) == ConfigRendering.referenceTable(options), "run `\(command)` and paste its table into docs/OPERATIONS.md")
    }

    func parseServe(file: String?, environment: [String: String] = [:], commandLine: [String] = []) throws -> ServeCommand {
        var arguments = ["serve"] + commandLine
        let path = file.map { Self.writeTemporary($0) }
        defer { if let path { unlink(path) } }
        if let path { arguments += ["--config", path] }
        let merged = LayeredCommandLine.arguments(arguments, environment: environment)
        return try ServeCommand.parse(Array(merged.dropFirst()))
    }

    static func writeTemporary(_ text: String) -> String {
        let path = "/tmp/bigpeer-config-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).yaml"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        return path
    }

    @Test func fileThenEnvironmentThenFlagsReachTheCommand() throws {
        let file = """
            port: 9001
            host: 0.0.0.0
            db-connections: 8
            log-level: notice
            access-log: off
            insecure-dev: true
            auth-webhook:
              - acme=http://127.0.0.1:9/auth
              - other=http://127.0.0.1:9/other
            upstream: ws://upstream.example:8080/api/v4/sync
            upstream-subscribe: [SELECT * FROM cars]
            """
        let fromFile = try parseServe(file: file)
        #expect(fromFile.port == 9001 && fromFile.host == "0.0.0.0" && fromFile.databaseConnections == 8)
        #expect(fromFile.logLevel == .notice && fromFile.accessLog == .off && fromFile.insecureDevelopment)
        #expect(fromFile.authWebhooks == ["acme=http://127.0.0.1:9/auth", "other=http://127.0.0.1:9/other"])
        #expect(fromFile.upstreamSubscriptions == ["SELECT * FROM cars"])

        let overridden = try parseServe(file: file, environment: ["BIGPEER_PORT": "9002", "BIGPEER_DB_CONNECTIONS": "4", "DATABASE_URL": "postgresql://x/y"],
                                        commandLine: ["--port", "9003", "--auth-webhook", "third=http://127.0.0.1:9/3"])
        #expect(overridden.port == 9003)
        #expect(overridden.databaseConnections == 4)
        #expect(overridden.database.databaseURL == "postgresql://x/y")
        #expect(overridden.authWebhooks == ["third=http://127.0.0.1:9/3"])
        #expect(overridden.host == "0.0.0.0")
    }

    @Test func optionGroupsAndOtherCommandsShareTheFile() throws {
        let file = "lan: true\nlan-port: 4041\njwt-leeway: 5\ndata-dir: /tmp/x\nport: 1234\n"
        let serve = try parseServe(file: file)
        #expect(serve.lan.enabled && serve.lan.port == 4041 && serve.jwt.leewaySeconds == 5 && serve.database.dataDirectory == "/tmp/x")
        // migrate takes the database options and leaves the rest of serve's file alone.
        let path = Self.writeTemporary(file)
        defer { unlink(path) }
        let merged = LayeredCommandLine.arguments(["migrate", "--config", path], environment: ["BIGPEER_PORT": "1"])
        let migrate = try MigrateCommand.parse(Array(merged.dropFirst()))
        #expect(migrate.database.dataDirectory == "/tmp/x")
        // keys create takes data-dir too, but its own options are no settings of the file or the environment.
        let keys = LayeredCommandLine.arguments(["keys", "create", "--config", path], environment: ["BIGPEER_DESCRIPTION": "x", "BIGPEER_DATA_DIR": "/tmp/y"])
        #expect(keys == ["keys", "create", "--config", path, "--data-dir=/tmp/y"])
    }

    @Test func serveValidationSeesTheMergedValues() {
        #expect(throws: (any Error).self) { try parseServe(file: "tls-cert: /etc/cert.pem\n") }  // --tls-key missing
        #expect(throws: (any Error).self) { try parseServe(file: "port: 70000\n") }
    }

    @Test func helpIsNotBlockedByABrokenConfiguration() {
        #expect(LayeredCommandLine.arguments(["serve", "--config", "/nonexistent.yaml", "--help"], environment: [:])
                == ["serve", "--config", "/nonexistent.yaml", "--help"])
        #expect(LayeredCommandLine.arguments(["version"], environment: ["BIGPEER_PORT": "x"]) == ["version"])
    }

    @Test func theShippedConfigurationIsValid() throws {
        let layers = try LayeredCommandLine.resolve(ServeCommand.self, commandLine: [], environment: [:], file: Self.root + "/deploy/bigpeer.yaml")
        try ConfigCommand.validateServe(layers.addedArguments, origin: "deploy/bigpeer.yaml")
        #expect(layers.settings.contains { if case .file = $0.source { true } else { false } })
    }
}
