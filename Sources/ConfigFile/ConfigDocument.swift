import Glibc
import Yams

/// A configuration file, read and checked against the options it may set: each key is an
/// option's long name, each value has the option's type. Nothing is applied here; the values
/// are the strings the command line would carry.
public struct ConfigDocument: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        /// One string for an option that takes one value (`true`/`false` for a flag), one per
        /// item for a repeatable option.
        public var values: [String]
        public var line: Int
    }

    public var path: String
    public var entries: [String: Entry]

    /// Larger files are refused before they are parsed: a configuration is a few kilobytes.
    public static let maxBytes = 1 << 20

    /// Reads `path` and checks it against `options`.
    public static func load(path: String, options: [ConfigOption]) throws(ConfigError) -> ConfigDocument {
        try parse(readBytes(path), path: path, options: options)
    }

    /// Checks `bytes` (the file's content; `path` names it in errors) against `options`.
    public static func parse(_ bytes: [UInt8], path: String, options: [ConfigOption]) throws(ConfigError) -> ConfigDocument {
        guard bytes.count <= maxBytes else { throw .tooLarge(path: path, limit: maxBytes) }
        if let nul = bytes.firstIndex(of: 0) {
            throw .notText(path: path, line: lineNumber(of: nul, in: bytes), reason: "a NUL byte")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .notText(path: path, line: firstInvalidUTF8Line(bytes), reason: "bytes that are not UTF-8")
        }
        if let alias = YAMLAliasScanner.firstAlias(in: bytes) {
            throw .alias(path: path, line: alias.line, column: alias.column)
        }
        let root: Node?
        do { root = try Yams.compose(yaml: text) } catch { throw .syntax(path: path, message: "\(error)") }
        guard let root else { return ConfigDocument(path: path, entries: [:]) }  // empty, or only comments
        guard case .mapping(let mapping) = root else { throw .notAMapping(path: path, line: root.mark?.line ?? 1) }
        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var entries: [String: Entry] = [:]
        for (keyNode, valueNode) in mapping {
            let line = keyNode.mark?.line ?? 1
            guard case .scalar(let key) = keyNode else {
                throw .wrongType(path: path, line: line, key: "(key)", expected: "an option name", found: describe(keyNode))
            }
            guard let option = byName[key.string] else {
                throw .unknownKey(path: path, line: line, key: key.string, suggestion: closest(to: key.string, among: byName.keys.sorted()))
            }
            if let values = try values(of: valueNode, for: option, path: path, line: line) {
                entries[option.name] = Entry(values: values, line: line)
            }
        }
        return ConfigDocument(path: path, entries: entries)
    }

    /// The strings `node` stands for; nil for `null`, `~` or nothing (the option stays unset).
    private static func values(of node: Node, for option: ConfigOption, path: String, line: Int) throws(ConfigError) -> [String]? {
        func wrong(_ found: Node) -> ConfigError {
            .wrongType(path: path, line: found.mark?.line ?? line, key: option.name, expected: option.expected, found: describe(found))
        }
        switch node {
        case .scalar(let scalar):
            if scalar.style == .plain && ["", "~", "null", "Null", "NULL"].contains(scalar.string) { return nil }
            guard let value = ConfigValueCheck.value(scalar.string, quoted: scalar.style != .plain, for: option.kind) else { throw wrong(node) }
            return [value]
        case .sequence(let sequence) where option.repeating:
            var items: [String] = []
            for item in sequence {
                guard case .scalar(let scalar) = item,
                      let value = ConfigValueCheck.value(scalar.string, quoted: scalar.style != .plain, for: option.kind) else { throw wrong(item) }
                items.append(value)
            }
            return items
        default:
            throw wrong(node)
        }
    }

    private static func describe(_ node: Node) -> String {
        switch node {
        case .scalar(let s): "\"\(s.string.count > 60 ? String(s.string.prefix(60)) + "…" : s.string)\""
        case .mapping: "a mapping"
        case .sequence: "a list"
        case .alias: "an alias"
        }
    }

    private static func readBytes(_ path: String) throws(ConfigError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
            if n == 0 { return bytes }
            bytes.append(contentsOf: chunk[..<n])
            // A device or a FIFO can be endless: stop reading at the limit.
            if bytes.count > maxBytes { throw .tooLarge(path: path, limit: maxBytes) }
        }
    }

    private static func lineNumber(of offset: Int, in bytes: [UInt8]) -> Int {
        1 + bytes[..<offset].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
    }

    private static func firstInvalidUTF8Line(_ bytes: [UInt8]) -> Int {
        var start = 0
        var line = 1
        for (i, b) in bytes.enumerated() where b == 0x0A {
            if String(validating: bytes[start..<i], as: UTF8.self) == nil { return line }
            start = i + 1
            line += 1
        }
        return line
    }
}

/// The type check the file and the environment share.
enum ConfigValueCheck {
    /// `text` as the command line would carry it, or nil when it is not of `kind`.
    static func value(_ text: String, quoted: Bool, for kind: ConfigOption.Kind) -> String? {
        switch kind {
        case .flag:
            guard !quoted else { return nil }
            switch text.lowercased() {
            case "true": return "true"
            case "false": return "false"
            default: return nil
            }
        case .integer:
            let digits = text.first == "-" || text.first == "+" ? text.dropFirst() : Substring(text)
            guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return text.first == "+" ? String(digits) : text
        case .text:
            return text
        case .choice(let words):
            return words.contains(text) ? text : nil
        }
    }
}
