// A subscription as the peer side keeps it (PROTOCOL.md §4.3).

import Values

/// A sync subscription: a `SELECT * FROM collection [WHERE ...]` with arguments (PROTOCOL.md §4.3).
/// Its key (query text + arguments) names its checkpoint in the store, so a peer that subscribes
/// to the same query after a restart resumes where it was.
///
/// Two subscriptions are the same only when their texts are the same bytes: Swift's `String`
/// compares canonically equivalent text as equal ("é" precomposed or decomposed), but PostgreSQL
/// does not, so such queries can match different documents. The key is therefore ASCII (every
/// other character, and the backslash, escaped), which Swift compares byte for byte too.
public struct SyncSubscription: Sendable, Equatable, Hashable {
    public var query: String
    public var arguments: [String: Value]
    public var collection: String
    public var key: String { Self.ascii(query) + "\u{0}" + Self.ascii(JSON.string(.object(arguments))) }

    public static func == (a: SyncSubscription, b: SyncSubscription) -> Bool {
        a.key == b.key && a.collection.utf8Equals(b.collection)
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(key) }

    /// `text` with every scalar outside printable ASCII, and the backslash, as `\u{HEX}`.
    static func ascii(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            if scalar.value >= 0x20 && scalar.value < 0x7F && scalar != "\\" {
                out.unicodeScalars.append(scalar)
            } else {
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            }
        }
        return out
    }

    public init(query: String, arguments: [String: Value], collection: String) {
        self.query = query
        self.arguments = arguments
        self.collection = collection
    }
}
