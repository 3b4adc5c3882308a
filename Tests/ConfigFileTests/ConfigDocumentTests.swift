@testable import ConfigFile
import Testing

/// A few options of every kind, the shape of `serve`'s.
let testOptions = [
    ConfigOption(name: "port", kind: .integer, defaultValue: "8080", help: "Port."),
    ConfigOption(name: "host", kind: .text, defaultValue: "127.0.0.1", help: "Host."),
    ConfigOption(name: "insecure-dev", kind: .flag, help: "Development only."),
    ConfigOption(name: "log-level", kind: .choice(["info", "notice"]), defaultValue: "info", help: "Level."),
    ConfigOption(name: "upstream-subscribe", kind: .text, repeating: true, help: "Queries."),
    ConfigOption(name: "auth-webhook", kind: .text, repeating: true, help: "NAME=URL.", secrecy: .url),
    ConfigOption(name: "upstream-key", kind: .text, help: "Key.", secrecy: .whole),
    ConfigOption(name: "database-url", kind: .text, help: "Database.", secrecy: .url, olderEnvironment: ["DATABASE_URL"]),
]

func document(_ text: String) throws(ConfigError) -> ConfigDocument {
    try ConfigDocument.parse(Array(text.utf8), path: "bigpeer.yaml", options: testOptions)
}

@Suite struct ConfigDocumentTests {
    @Test func everyKindOfValueWithItsLine() throws {
        let doc = try document("""
            # a comment
            port: 9000
            host: "0.0.0.0"
            insecure-dev: true
            log-level: notice
            upstream-subscribe:
              - SELECT * FROM cars WHERE color = 'blue'
              - "SELECT * FROM trucks"
            auth-webhook: acme=https://auth.example/hook
            upstream-key: ~
            """)
        #expect(doc.entries["port"] == .init(values: ["9000"], line: 2))
        #expect(doc.entries["host"] == .init(values: ["0.0.0.0"], line: 3))
        #expect(doc.entries["insecure-dev"] == .init(values: ["true"], line: 4))
        #expect(doc.entries["log-level"] == .init(values: ["notice"], line: 5))
        #expect(doc.entries["upstream-subscribe"] == .init(values: ["SELECT * FROM cars WHERE color = 'blue'", "SELECT * FROM trucks"], line: 6))
        // One scalar is a list of one.
        #expect(doc.entries["auth-webhook"] == .init(values: ["acme=https://auth.example/hook"], line: 9))
        // null leaves the option unset.
        #expect(doc.entries["upstream-key"] == nil)
    }

    @Test func emptyOrCommentsOnlyIsAnEmptyConfiguration() throws {
        #expect(try document("").entries.isEmpty)
        #expect(try document("# nothing set\n").entries.isEmpty)
    }

    @Test func unknownKeyNamesItsLineAndTheNearestOption() {
        #expect(throws: ConfigError.unknownKey(path: "bigpeer.yaml", line: 3, key: "prot", suggestion: "port")) {
            try document("host: a\n\nprot: 1\n")
        }
        #expect(throws: ConfigError.unknownKey(path: "bigpeer.yaml", line: 1, key: "database_url", suggestion: "database-url")) {
            try document("database_url: x\n")
        }
        #expect(throws: ConfigError.unknownKey(path: "bigpeer.yaml", line: 1, key: "completely-else", suggestion: nil)) {
            try document("completely-else: 1\n")
        }
        let message = "\(ConfigError.unknownKey(path: "bigpeer.yaml", line: 3, key: "prot", suggestion: "port"))"
        #expect(message == "bigpeer.yaml:3: unknown key 'prot' (did you mean 'port'?)")
    }

    @Test func wrongTypesNameTheKeyAndTheExpectedType() {
        #expect(throws: ConfigError.wrongType(path: "bigpeer.yaml", line: 2, key: "port", expected: "an integer", found: "\"80a\"")) {
            try document("host: a\nport: 80a\n")
        }
        #expect(throws: ConfigError.wrongType(path: "bigpeer.yaml", line: 1, key: "insecure-dev", expected: "true or false", found: "\"yes\"")) {
            try document("insecure-dev: yes\n")
        }
        #expect(throws: ConfigError.wrongType(path: "bigpeer.yaml", line: 1, key: "log-level", expected: "one of info, notice", found: "\"loud\"")) {
            try document("log-level: loud\n")
        }
        #expect(throws: ConfigError.wrongType(path: "bigpeer.yaml", line: 1, key: "host", expected: "a string", found: "a list")) {
            try document("host: [a, b]\n")
        }
        #expect(throws: ConfigError.wrongType(path: "bigpeer.yaml", line: 3, key: "upstream-subscribe", expected: "a list of strings", found: "a mapping")) {
            try document("upstream-subscribe:\n  - SELECT * FROM a\n  - {x: 1}\n")
        }
        #expect(throws: ConfigError.notAMapping(path: "bigpeer.yaml", line: 1)) { try document("- port\n") }
    }

    @Test func duplicateKeysAndBadSyntaxAreYAMLErrors() throws {
        let duplicate = try #require(throws: ConfigError.self) { try document("port: 1\nport: 2\n") }
        #expect("\(duplicate)".hasPrefix("bigpeer.yaml: not valid YAML: ") && "\(duplicate)".contains("'port'"))
        let unclosed = try #require(throws: ConfigError.self) { try document("host: a\nport: [1\n") }
        #expect("\(unclosed)".hasPrefix("bigpeer.yaml: not valid YAML: 3:1"), "\(unclosed)")
    }

    @Test func aNulByteOrBytesThatAreNotUTF8AreRefused() {
        #expect(throws: ConfigError.notText(path: "bigpeer.yaml", line: 2, reason: "a NUL byte")) {
            try ConfigDocument.parse(Array("port: 1\nhost: a\u{0}b\n".utf8), path: "bigpeer.yaml", options: testOptions)
        }
        #expect(throws: ConfigError.notText(path: "bigpeer.yaml", line: 2, reason: "bytes that are not UTF-8")) {
            try ConfigDocument.parse(Array("port: 1\n".utf8) + [0x68, 0x3A, 0x20, 0xFF, 0x0A], path: "bigpeer.yaml", options: testOptions)
        }
    }

    @Test func aFileOverTheLimitIsRefusedBeforeParsing() {
        let big = [UInt8](repeating: 0x20, count: ConfigDocument.maxBytes + 1)
        #expect(throws: ConfigError.tooLarge(path: "big.yaml", limit: ConfigDocument.maxBytes)) {
            try ConfigDocument.parse(big, path: "big.yaml", options: testOptions)
        }
        // An endless file: reading stops at the limit.
        #expect(throws: ConfigError.tooLarge(path: "/dev/zero", limit: ConfigDocument.maxBytes)) {
            try ConfigDocument.load(path: "/dev/zero", options: testOptions)
        }
        #expect(throws: ConfigError.unreadable(path: "/nonexistent/bigpeer.yaml", reason: "No such file or directory")) {
            try ConfigDocument.load(path: "/nonexistent/bigpeer.yaml", options: testOptions)
        }
    }

    /// Nine levels of nine aliases each: 9^9 (387 million) nodes if expanded, 400 bytes of text.
    @Test func billionLaughsIsRefusedAtItsFirstAlias() {
        var text = "l0: &l0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n"
        for level in 1...9 {
            text += "l\(level): &l\(level) [" + Array(repeating: "*l\(level - 1)", count: 9).joined(separator: ", ") + "]\n"
        }
        // As a key, Yams would hash the whole expansion while composing the mapping.
        text += "? *l9\n: 1\n"
        #expect(throws: ConfigError.alias(path: "bigpeer.yaml", line: 2, column: 10)) { try document(text) }
    }
}
