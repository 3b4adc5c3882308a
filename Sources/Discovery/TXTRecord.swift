// DNS-SD TXT data as key/value pairs (RFC 6763 §6): each string is `key=value` or a bare `key`
// (a boolean attribute); keys are printable ASCII without `=`, compared case-insensitively, and
// only the first occurrence of a key counts (§6.4). An empty TXT record is one zero byte (§6.1).

public struct TXTRecord: Hashable, Sendable {
    public struct Entry: Hashable, Sendable {
        public var key: String
        /// nil for a bare key (`key` with no `=`); empty for `key=`.
        public var value: [UInt8]?

        public init(key: String, value: [UInt8]?) {
            self.key = key
            self.value = value
        }
    }

    public private(set) var entries: [Entry]

    public init() { entries = [] }

    /// Pairs in order; the value as UTF-8. Fails on a key that is empty, not printable ASCII, contains
    /// `=`, or a pair longer than 255 bytes.
    public init(_ pairs: [(String, String)]) throws(TXTRecordError) {
        entries = []
        for (key, value) in pairs { try set(key, Array(value.utf8)) }
    }

    /// Adds or replaces `key`.
    public mutating func set(_ key: String, _ value: [UInt8]?) throws(TXTRecordError) {
        let keyBytes = Array(key.utf8)
        guard !keyBytes.isEmpty, keyBytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E && $0 != 0x3D }) else { throw .badKey(key) }
        let length = keyBytes.count + (value.map { 1 + $0.count } ?? 0)
        guard length <= 255 else { throw .pairTooLong(key: key, length: length) }
        let entry = Entry(key: key, value: value)
        if let index = entries.firstIndex(where: { Self.keysEqual($0.key, key) }) {
            entries[index] = entry
        } else {
            entries.append(entry)
        }
    }

    /// The value of `key` as UTF-8 text (invalid bytes repaired), "" for a bare key, nil when absent.
    public subscript(key: String) -> String? {
        guard let entry = entries.first(where: { Self.keysEqual($0.key, key) }) else { return nil }
        return String(decoding: entry.value ?? [], as: UTF8.self)
    }

    /// The raw bytes of `key`'s value (nil for a bare or absent key).
    public func value(_ key: String) -> [UInt8]? {
        entries.first(where: { Self.keysEqual($0.key, key) })?.value
    }

    /// The character-strings of the TXT rdata (empty when there are no entries: the codec then
    /// writes the single zero byte).
    public var strings: [[UInt8]] {
        entries.map { entry in Array(entry.key.utf8) + (entry.value.map { [0x3D] + $0 } ?? []) }
    }

    /// Reads rdata strings: empty strings are skipped, a string starting with `=` is ignored, and a
    /// repeated key keeps its first value (RFC 6763 §6.4).
    public init(strings: [[UInt8]]) {
        entries = []
        for string in strings where !string.isEmpty {
            let equals = string.firstIndex(of: 0x3D)
            let keyBytes = equals.map { Array(string[..<$0]) } ?? string
            guard !keyBytes.isEmpty else { continue }
            let key = String(decoding: keyBytes, as: UTF8.self)
            guard !entries.contains(where: { Self.keysEqual($0.key, key) }) else { continue }
            entries.append(Entry(key: key, value: equals.map { Array(string[($0 + 1)...]) }))
        }
    }

    static func keysEqual(_ a: String, _ b: String) -> Bool {
        DNSName.labelsEqual(Array(a.utf8), Array(b.utf8))
    }
}

public enum TXTRecordError: Error, Equatable, Sendable, CustomStringConvertible {
    case badKey(String)
    case pairTooLong(key: String, length: Int)

    public var description: String {
        switch self {
        case let .badKey(key): "TXT key \(key.debugDescription) is empty, contains '=', or is not printable ASCII"
        case let .pairTooLong(key, length): "TXT pair for key \(key.debugDescription) is \(length) bytes (limit 255)"
        }
    }
}
