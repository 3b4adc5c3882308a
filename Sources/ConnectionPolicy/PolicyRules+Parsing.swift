import SyncProtocol
import Values

/// Why a policy file (or the webhook URL) was refused: where (a line and column for bad JSON,
/// else the rule) and what.
public struct PolicyConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var location: String
    public var message: String

    public init(_ location: String, _ message: String) {
        self.location = location
        self.message = message
    }

    public var description: String { location.isEmpty ? message : "\(location): \(message)" }
}

extension PolicyRules {
    /// Bounds on a policy file, checked before and while it is parsed.
    public struct Limits: Sendable {
        public var maxFileBytes = 256 << 10
        public var maxRules = 1000
        /// Entries of one `deviceName`, `principal`, `link` or metadata-key list.
        public var maxPatternsPerList = 64
        /// Entries of one `peerKey` list (a set: matching is one lookup, however long).
        public var maxPeerKeysPerRule = 10_000
        public var maxMetadataKeysPerRule = 64
        /// Patterns in the whole file: with `Glob`'s linear matching, this bounds the work per candidate.
        public var maxPatterns = 4096
        public var maxRetryAfterSeconds: UInt32 = 86_400
        public var maxTextBytes = 100
        public init() {}
    }

    static let ruleKeys: Set<String> = ["name", "action", "peerKey", "deviceName", "metadata", "link", "principal", "reason", "retryAfterSeconds"]
    static let fileKeys: Set<String> = ["version", "default", "retryAfterSeconds", "rules"]

    /// Parses and checks a policy file (docs/LOCAL-NODE.md, "Connection policy"). Everything
    /// unknown or out of bounds is an error naming the line (bad JSON) or the rule.
    public static func parse(_ bytes: [UInt8], limits: Limits = Limits()) throws(PolicyConfigurationError) -> PolicyRules {
        guard bytes.count <= limits.maxFileBytes else {
            throw PolicyConfigurationError("", "the file has \(bytes.count) bytes (at most \(limits.maxFileBytes))")
        }
        let root: Value
        do {
            // Depth 5: file object, rules array, rule object, metadata object, a list inside it.
            root = try JSON.parse(bytes, limits: JSONLimits(maxDepth: 5, maxInputBytes: limits.maxFileBytes, duplicateKeys: .reject))
        } catch {
            throw PolicyConfigurationError("line \(error.line), column \(error.column)", "\(error)")
        }
        guard case .object(let file) = root else { throw PolicyConfigurationError("", "the file must hold a JSON object") }
        if let unknown = file.keys.sorted().first(where: { !fileKeys.contains($0) }) {
            throw PolicyConfigurationError("", "unknown key \"\(unknown)\" (known: \(fileKeys.sorted().joined(separator: ", ")))")
        }
        guard file["version"] == .int(1) else { throw PolicyConfigurationError("", "\"version\": 1 is required") }
        guard case .string(let d)? = file["default"], let defaultAction = Action(rawValue: d) else {
            throw PolicyConfigurationError("", "\"default\" must be \"allow\" or \"deny\"")
        }
        let defaultRetry = try retryAfter(file["retryAfterSeconds"], "", limits) ?? 60
        guard case .array(let list)? = file["rules"] else { throw PolicyConfigurationError("", "\"rules\" must be an array (it may be empty)") }
        guard list.count <= limits.maxRules else { throw PolicyConfigurationError("", "\(list.count) rules (at most \(limits.maxRules))") }
        var budget = limits.maxPatterns
        var rules: [Rule] = []
        rules.reserveCapacity(list.count)
        for (i, entry) in list.enumerated() {
            rules.append(try rule(entry, number: i + 1, defaultRetry: defaultRetry, limits: limits, patternBudget: &budget))
        }
        return PolicyRules(rules: rules, defaultAction: defaultAction, defaultRetryAfterSeconds: defaultRetry)
    }

    static func rule(_ entry: Value, number: Int, defaultRetry: UInt32, limits: Limits, patternBudget: inout Int) throws(PolicyConfigurationError) -> Rule {
        var label = "rule \(number)"
        guard case .object(let o) = entry else { throw PolicyConfigurationError(label, "a rule must be a JSON object") }
        if let name = o["name"] {
            guard case .string(let n) = name, n.utf8.count <= limits.maxTextBytes else {
                throw PolicyConfigurationError(label, "\"name\" must be a string of at most \(limits.maxTextBytes) bytes")
            }
            label += " (\(n))"
        }
        if let unknown = o.keys.sorted().first(where: { !ruleKeys.contains($0) }) {
            throw PolicyConfigurationError(label, "unknown key \"\(unknown)\" (known: \(ruleKeys.sorted().joined(separator: ", ")))")
        }
        guard case .string(let a)? = o["action"], let action = Action(rawValue: a) else {
            throw PolicyConfigurationError(label, "\"action\" must be \"allow\" or \"deny\"")
        }
        var rule = Rule(label: label, action: action, retryAfterSeconds: try retryAfter(o["retryAfterSeconds"], label, limits) ?? defaultRetry)
        if let reason = o["reason"] {
            guard case .string(let r) = reason, r.utf8.count <= limits.maxTextBytes else {
                throw PolicyConfigurationError(label, "\"reason\" must be a string of at most \(limits.maxTextBytes) bytes")
            }
            rule.reason = r
        }
        if let keys = o["peerKey"] {
            var set = Set<[UInt8]>()
            for text in try strings(keys, "peerKey", label, max: limits.maxPeerKeysPerRule) {
                guard let key = Hex.decode(text), !key.isEmpty, key.count <= 256 else {
                    throw PolicyConfigurationError(label, "peerKey \"\(text.prefix(40))\" is not 1 to 256 bytes of hex")
                }
                set.insert(key)
            }
            rule.peerKeys = set
        }
        if let names = o["deviceName"] {
            rule.deviceNames = try globs(names, "deviceName", label, limits, &patternBudget)
        }
        if let principals = o["principal"] {
            rule.principals = try globs(principals, "principal", label, limits, &patternBudget)
        }
        if let links = o["link"] {
            var set = Set<LinkType>()
            for text in try strings(links, "link", label, max: limits.maxPatternsPerList) {
                guard let link = LinkType(rawValue: text) else {
                    throw PolicyConfigurationError(label, "link \"\(text.prefix(40))\" is none of \(LinkType.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                set.insert(link)
            }
            rule.links = set
        }
        if let meta = o["metadata"] {
            guard case .object(let entries) = meta, entries.count <= limits.maxMetadataKeysPerRule else {
                throw PolicyConfigurationError(label, "\"metadata\" must be an object of at most \(limits.maxMetadataKeysPerRule) keys")
            }
            for key in entries.keys.sorted() {
                if let value = entries[key] {
                    rule.metadata.append((key, try globs(value, "metadata.\(key)", label, limits, &patternBudget)))
                }
            }
        }
        return rule
    }

    /// A string or a non-empty array of strings.
    static func strings(_ value: Value, _ field: String, _ label: String, max: Int) throws(PolicyConfigurationError) -> [String] {
        switch value {
        case .string(let s): return [s]
        case .array(let list) where !list.isEmpty && list.count <= max:
            var out: [String] = []
            for item in list {
                guard case .string(let s) = item else { throw PolicyConfigurationError(label, "\(field): every entry must be a string") }
                out.append(s)
            }
            return out
        default:
            throw PolicyConfigurationError(label, "\(field) must be a string or an array of 1 to \(max) strings")
        }
    }

    static func globs(_ value: Value, _ field: String, _ label: String, _ limits: Limits, _ budget: inout Int) throws(PolicyConfigurationError) -> [Glob] {
        let texts = try strings(value, field, label, max: limits.maxPatternsPerList)
        budget -= texts.count
        guard budget >= 0 else { throw PolicyConfigurationError(label, "more than \(limits.maxPatterns) patterns in the file") }
        var out: [Glob] = []
        for text in texts {
            do {
                out.append(try Glob(text))
            } catch {
                throw PolicyConfigurationError(label, "\(field): \(error)")
            }
        }
        return out
    }

    static func retryAfter(_ value: Value?, _ label: String, _ limits: Limits) throws(PolicyConfigurationError) -> UInt32? {
        guard let value else { return nil }
        guard case .int(let n) = value, n >= 0, n <= Int64(limits.maxRetryAfterSeconds) else {
            throw PolicyConfigurationError(label, "\"retryAfterSeconds\" must be an integer from 0 to \(limits.maxRetryAfterSeconds)")
        }
        return UInt32(n)
    }
}
