// A domain name as its labels. DNS compares names ASCII-case-insensitively (RFC 1035 §2.3.3,
// RFC 4343) and otherwise byte for byte: instance names are UTF-8 with no Unicode normalisation
// (RFC 6763 §4.3), so two names whose bytes differ other than in ASCII case are different names,
// even where Swift's String would call them equal.

public struct DNSName: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The labels, without the empty root label. Each is 1…63 bytes; the wire form is ≤ 255 bytes.
    public let labels: [[UInt8]]

    public static let maxLabelLength = 63
    public static let maxWireLength = 255
    public static let root = DNSName(unchecked: [])

    init(unchecked labels: [[UInt8]]) { self.labels = labels }

    public init(labels: [[UInt8]]) throws(DNSError) {
        var length = 1
        for label in labels {
            if label.isEmpty { throw .emptyLabel }
            if label.count > Self.maxLabelLength { throw .badLabel(offset: length - 1, length: label.count) }
            length += 1 + label.count
        }
        if length > Self.maxWireLength { throw .nameTooLong(length: length) }
        self.labels = labels
    }

    /// A name written with dots between labels (a trailing dot is optional). No escapes: a label
    /// that contains a dot (an instance name may) is built with `prepending(_:)`.
    public init(_ text: String) throws(DNSError) {
        var parts = text.split(separator: ".", omittingEmptySubsequences: false).map { Array($0.utf8) }
        if parts.last?.isEmpty == true { parts.removeLast() }
        if parts.count == 1 && parts[0].isEmpty { parts = [] }
        try self.init(labels: parts)
    }

    /// This name with one more label in front: `Ship Node` + `_bigpeer._tcp.local`.
    public func prepending(_ label: String) throws(DNSError) -> DNSName {
        try DNSName(labels: [Array(label.utf8)] + labels)
    }

    /// The name without its first label (the root stays the root).
    public var parent: DNSName { DNSName(unchecked: Array(labels.dropFirst())) }

    /// The first label as text (invalid UTF-8 repaired), "" for the root.
    public var firstLabel: String { labels.first.map { String(decoding: $0, as: UTF8.self) } ?? "" }

    public var wireLength: Int { labels.reduce(1) { $0 + 1 + $1.count } }

    /// Dotted text with a trailing dot; dots and backslashes inside a label are escaped with `\`.
    public var description: String {
        if labels.isEmpty { return "." }
        var text = ""
        for label in labels {
            for scalar in String(decoding: label, as: UTF8.self).unicodeScalars {
                if scalar == "." || scalar == "\\" { text.append("\\") }
                text.unicodeScalars.append(scalar)
            }
            text.append(".")
        }
        return text
    }

    public static func == (lhs: DNSName, rhs: DNSName) -> Bool {
        guard lhs.labels.count == rhs.labels.count else { return false }
        for (a, b) in zip(lhs.labels, rhs.labels) where !Self.labelsEqual(a, b) { return false }
        return true
    }

    /// Label by label from the left, ASCII case folded: an order consistent with `==`, so that
    /// sets of names can be walked the same way every run.
    public static func < (lhs: DNSName, rhs: DNSName) -> Bool {
        for (a, b) in zip(lhs.labels, rhs.labels) where !labelsEqual(a, b) {
            return a.map(asciiLower).lexicographicallyPrecedes(b.map(asciiLower))
        }
        return lhs.labels.count < rhs.labels.count
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(labels.count)
        for label in labels {
            hasher.combine(label.count)
            for byte in label { hasher.combine(Self.asciiLower(byte)) }
        }
    }

    /// True when this name is `suffix` or ends with it (`x._bigpeer._tcp.local` ends with `local`).
    public func hasSuffix(_ suffix: DNSName) -> Bool {
        guard suffix.labels.count <= labels.count else { return false }
        return DNSName(unchecked: Array(labels.suffix(suffix.labels.count))) == suffix
    }

    static func asciiLower(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }

    static func labelsEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where asciiLower(x) != asciiLower(y) { return false }
        return true
    }

    /// The uncompressed wire form: what §8.2's tie-break compares inside rdata.
    var uncompressedWire: [UInt8] {
        var bytes: [UInt8] = []
        for label in labels {
            bytes.append(UInt8(label.count))
            bytes.append(contentsOf: label)
        }
        bytes.append(0)
        return bytes
    }
}
