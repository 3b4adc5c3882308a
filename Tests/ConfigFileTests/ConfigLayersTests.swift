@testable import ConfigFile
import Testing

@Suite struct ConfigLayersTests {
    func setting(_ layers: ConfigLayers, _ name: String) -> ConfigLayers.Setting? {
        layers.settings.first { $0.option.name == name }
    }

    @Test func commandLineBeatsEnvironmentBeatsFileBeatsDefault() throws {
        let file = try document("port: 1000\nhost: file.example\nlog-level: notice\n")
        let layers = try ConfigLayers.resolve(options: testOptions, file: file,
                                              environment: ["BIGPEER_PORT": "2000", "BIGPEER_HOST": "env.example"],
                                              commandLine: ["--port", "3000"])
        #expect(setting(layers, "port")?.values == ["3000"])
        #expect(setting(layers, "port")?.source == .commandLine)
        #expect(setting(layers, "host")?.values == ["env.example"])
        #expect(setting(layers, "host")?.source == .environment("BIGPEER_HOST"))
        #expect(setting(layers, "log-level")?.source == .file(path: "bigpeer.yaml", line: 3))
        #expect(setting(layers, "insecure-dev")?.source == .defaultValue)
        // The command line is read as typed; the rest is appended after it.
        #expect(layers.addedArguments == ["--host=env.example", "--log-level=notice"])
    }

    @Test func anEmptyVariableCountsAsUnset() throws {
        let layers = try ConfigLayers.resolve(options: testOptions, file: try document("port: 1000\n"), environment: ["BIGPEER_PORT": ""], commandLine: [])
        #expect(setting(layers, "port")?.values == ["1000"])
    }

    @Test func flagsFromEveryLayer() throws {
        let fromFile = try ConfigLayers.resolve(options: testOptions, file: try document("insecure-dev: true\n"), environment: [:], commandLine: [])
        #expect(fromFile.addedArguments == ["--insecure-dev"])
        let offInEnvironment = try ConfigLayers.resolve(options: testOptions, file: try document("insecure-dev: true\n"),
                                                        environment: ["BIGPEER_INSECURE_DEV": "0"], commandLine: [])
        #expect(offInEnvironment.addedArguments == [])
        #expect(setting(offInEnvironment, "insecure-dev")?.values == ["false"])
        let onCommandLine = try ConfigLayers.resolve(options: testOptions, file: nil, environment: [:], commandLine: ["--insecure-dev"])
        #expect(setting(onCommandLine, "insecure-dev")?.source == .commandLine)
        #expect(onCommandLine.addedArguments == [])
        #expect(throws: ConfigError.badEnvironment(variable: "BIGPEER_INSECURE_DEV", expected: "true, false, 1 or 0", found: "\"yes\"")) {
            try ConfigLayers.resolve(options: testOptions, file: nil, environment: ["BIGPEER_INSECURE_DEV": "yes"], commandLine: [])
        }
    }

    @Test func aRepeatableOptionIsReplacedWholeByALaterLayer() throws {
        let file = try document("upstream-subscribe:\n  - SELECT * FROM a\n  - SELECT * FROM b\n")
        let fromFile = try ConfigLayers.resolve(options: testOptions, file: file, environment: [:], commandLine: [])
        #expect(fromFile.addedArguments == ["--upstream-subscribe=SELECT * FROM a", "--upstream-subscribe=SELECT * FROM b"])
        // One item per line in a variable: a comma can be part of a statement.
        let fromEnvironment = try ConfigLayers.resolve(options: testOptions, file: file,
                                                       environment: ["BIGPEER_UPSTREAM_SUBSCRIBE": "SELECT * FROM c WHERE x IN [1, 2]\n\nSELECT * FROM d\n"],
                                                       commandLine: [])
        #expect(setting(fromEnvironment, "upstream-subscribe")?.values == ["SELECT * FROM c WHERE x IN [1, 2]", "SELECT * FROM d"])
        let fromCommandLine = try ConfigLayers.resolve(options: testOptions, file: file, environment: [:],
                                                       commandLine: ["--upstream-subscribe", "SELECT * FROM e", "--upstream-subscribe=SELECT * FROM f"])
        #expect(setting(fromCommandLine, "upstream-subscribe")?.values == ["SELECT * FROM e", "SELECT * FROM f"])
        #expect(fromCommandLine.addedArguments == [])
    }

    @Test func olderVariableNamesAreReadAfterTheNewOne() throws {
        let older = try ConfigLayers.resolve(options: testOptions, file: try document("database-url: postgresql://file/db\n"),
                                             environment: ["DATABASE_URL": "postgresql://env/db"], commandLine: [])
        #expect(setting(older, "database-url")?.source == .environment("DATABASE_URL"))
        let both = try ConfigLayers.resolve(options: testOptions, file: nil,
                                            environment: ["DATABASE_URL": "postgresql://old/db", "BIGPEER_DATABASE_URL": "postgresql://new/db"], commandLine: [])
        #expect(setting(both, "database-url")?.values == ["postgresql://new/db"])
    }

    @Test func wrongTypesInTheEnvironmentNameTheVariable() {
        #expect(throws: ConfigError.badEnvironment(variable: "BIGPEER_PORT", expected: "an integer", found: "\"http\"")) {
            try ConfigLayers.resolve(options: testOptions, file: nil, environment: ["BIGPEER_PORT": "http"], commandLine: [])
        }
        #expect(throws: ConfigError.badEnvironment(variable: "BIGPEER_LOG_LEVEL", expected: "one of info, notice", found: "\"loud\"")) {
            try ConfigLayers.resolve(options: testOptions, file: nil, environment: ["BIGPEER_LOG_LEVEL": "loud"], commandLine: [])
        }
    }

    @Test func unknownBigPeerVariablesAreWarnedAboutNotFatal() throws {
        let layers = try ConfigLayers.resolve(options: testOptions, file: nil,
                                              environment: ["BIGPEER_PROT": "1", "BIGPEER_OPENAPI": "x", "HOME": "/root", "BIGPEER_ZZZZZZZZZZZZ": "1"],
                                              commandLine: [], otherVariables: ["BIGPEER_OPENAPI"])
        #expect(layers.warnings == ["BIGPEER_PROT is set but no option reads it (did you mean BIGPEER_PORT?)",
                                    "BIGPEER_ZZZZZZZZZZZZ is set but no option reads it"])
    }

    @Test func printShowsEachValueWithItsSourceAndHidesSecrets() throws {
        let file = try document("""
            port: 9000
            auth-webhook:
              - acme=https://hook:s3cret@auth.example/verify?token=abc&sslmode=require
            upstream-key: bpk_abc_supersecret
            """)
        let layers = try ConfigLayers.resolve(options: testOptions, file: file,
                                              environment: ["DATABASE_URL": "postgresql://bigpeer:hunter2@db:5432/bigpeer?sslmode=require&password=x"],
                                              commandLine: ["--host", "0.0.0.0"])
        // The redaction of user-info passwords is BigPeer's LogRedaction in the binary; a stand-in here.
        let text = ConfigRendering.effective(layers, header: "test") { url in
            url.replacingOccurrences(of: ":hunter2@", with: ":***@").replacingOccurrences(of: ":s3cret@", with: ":***@")
        }
        #expect(text == """
            # test
            port: 9000  # file bigpeer.yaml:1
            host: "0.0.0.0"  # command line
            insecure-dev: false  # default
            log-level: "info"  # default
            upstream-subscribe: []  # default
            auth-webhook:  # file bigpeer.yaml:2
              - "acme=https://hook:***@auth.example/verify?token=***&sslmode=require"
            upstream-key: "***"  # file bigpeer.yaml:4
            database-url: "postgresql://bigpeer:***@db:5432/bigpeer?sslmode=require&password=***"  # environment DATABASE_URL

            """)
        #expect(!text.contains("hunter2") && !text.contains("s3cret") && !text.contains("supersecret") && !text.contains("abc&"))
    }

    @Test func referenceTableHasARowPerOption() {
        let table = ConfigRendering.referenceTable(testOptions)
        #expect(table.split(separator: "\n").count == testOptions.count + 2)
        #expect(table.contains("| `database-url` | `BIGPEER_DATABASE_URL`, `DATABASE_URL` | a string, secret |  | Database. |"))
        #expect(table.contains("| `insecure-dev` | `BIGPEER_INSECURE_DEV` | true or false | `false` | Development only. |"))
    }
}

extension String {
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
