// Version vectors and field paths.

import Values

/// Site -> newest dot timestamp seen from that site in one document.
///
/// Invariant the whole engine rests on: if `self[s] == t`, every event site `s` created in this
/// document with a timestamp <= t is reflected here (stored, or superseded by something stored).
/// An absent site means nothing from it has been seen.
///
/// Stored as one array sorted by site (a document has few sites): 16 bytes per site and one small
/// allocation, instead of a hash table per document; lookups are binary searches.
public struct VersionVector: Hashable, Sendable, CustomStringConvertible {
    struct Entry: Hashable, Sendable {
        var site: SiteID
        var timestamp: HLCTimestamp
    }

    /// Sorted by site, one entry per site.
    private(set) var sorted: ContiguousArray<Entry>

    public init(_ entries: [SiteID: HLCTimestamp] = [:]) {
        sorted = ContiguousArray(entries.map { Entry(site: $0.key, timestamp: $0.value) }.sorted { $0.site < $1.site })
    }

    /// The vector as a dictionary (built on each call: iterate `sites` or subscript in hot paths).
    public var entries: [SiteID: HLCTimestamp] {
        Dictionary(uniqueKeysWithValues: sorted.map { ($0.site, $0.timestamp) })
    }

    /// The sites present, ascending.
    public var sites: [SiteID] { sorted.map(\.site) }

    public var isEmpty: Bool { sorted.isEmpty }

    private func search(_ site: SiteID) -> (found: Bool, index: Int) {
        var lo = 0, hi = sorted.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if sorted[mid].site < site { lo = mid + 1 } else { hi = mid }
        }
        return (lo < sorted.count && sorted[lo].site == site, lo)
    }

    public subscript(site: SiteID) -> HLCTimestamp? {
        get {
            let (found, i) = search(site)
            return found ? sorted[i].timestamp : nil
        }
        set {
            let (found, i) = search(site)
            switch (found, newValue) {
            case (true, let t?): sorted[i].timestamp = t
            case (true, nil): sorted.remove(at: i)
            case (false, let t?): sorted.insert(Entry(site: site, timestamp: t), at: i)
            case (false, nil): return
            }
        }
    }

    /// True if `dot` of `site` is already reflected.
    public func contains(_ site: SiteID, _ dot: HLCTimestamp) -> Bool {
        guard let t = self[site] else { return false }
        return dot <= t
    }

    /// Component-wise `>=`.
    public func covers(_ other: VersionVector) -> Bool {
        other.sorted.allSatisfy { contains($0.site, $0.timestamp) }
    }

    public mutating func formUnion(_ other: VersionVector) {
        for e in other.sorted { raise(e.site, to: e.timestamp) }
    }

    public mutating func raise(_ site: SiteID, to t: HLCTimestamp) {
        let (found, i) = search(site)
        if found {
            if sorted[i].timestamp < t { sorted[i].timestamp = t }
        } else {
            sorted.insert(Entry(site: site, timestamp: t), at: i)
        }
    }

    public var description: String {
        "[" + sorted.map { "\($0.site)=\($0.timestamp)" }.joined(separator: ", ") + "]"
    }
}

/// A path of MAP keys from the document root, e.g. `["address", "city"]` for `address.city`.
public struct FieldPath: Hashable, Sendable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public var keys: [String]

    public init(_ keys: [String]) { self.keys = keys }
    /// Splits on `.`; DQL hands over already-split paths when a key contains a dot.
    public init(dotted: String) { keys = dotted.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }
    public init(stringLiteral s: String) { self.init(dotted: s) }

    public var isRoot: Bool { keys.isEmpty }
    public var parent: FieldPath { FieldPath(Array(keys.dropLast())) }
    public func appending(_ key: String) -> FieldPath { FieldPath(keys + [key]) }
    public var description: String { keys.joined(separator: ".") }

    public static func < (a: FieldPath, b: FieldPath) -> Bool { a.keys.lexicographicallyPrecedes(b.keys) }
}

/// The declared type of a field (from `COLLECTION name (field TYPE, ...)` or the collection's schema).
public enum FieldType: String, Hashable, Sendable {
    case register = "REGISTER", map = "MAP", counter = "COUNTER", attachment = "ATTACHMENT"
}

/// How objects in written values are typed: strict (REGISTER unless declared MAP) or not (MAP).
public struct TypeDeclarations: Hashable, Sendable {
    public var strict: Bool
    public var declared: [FieldPath: FieldType]

    public init(strict: Bool = true, declared: [FieldPath: FieldType] = [:]) {
        self.strict = strict
        self.declared = declared
    }

    public static let strict = TypeDeclarations(strict: true)
    public static let nonStrict = TypeDeclarations(strict: false)

    /// The type a write of `value` at `path` takes.
    func type(at path: FieldPath, for value: Value) -> FieldType {
        if let t = declared[path] { return t }
        if !strict, case .object = value { return .map }
        return .register
    }

    /// Whether an absent or non-MAP `path` may be turned into a MAP so a child can be written.
    func mayCreateMap(at path: FieldPath) -> Bool {
        !strict || declared[path] == .map
    }
}

/// Errors of document operations, merges and decoding. Every failure path is one of these.
public enum CRDTError: Error, Sendable, Equatable, CustomStringConvertible {
    case documentDoesNotExist
    case invalidDocumentID(String)
    case idMismatch
    case emptyPath
    case tooDeep(FieldPath)
    case notAMap(FieldPath)
    case typeMismatch(FieldPath, expected: FieldType)
    case invalidNumber(FieldPath)
    /// The delta starts after what this replica has seen from `site`: ask for a delta since our vector.
    case deltaGap(site: SiteID)
    case malformed(String)
    case decoding(CBORError)
    case unsupportedVersion(UInt64)

    public var description: String {
        switch self {
        case .documentDoesNotExist: "the document does not exist (deleted or never inserted)"
        case .invalidDocumentID(let why): "invalid document _id: \(why)"
        case .idMismatch: "the value's _id differs from the document's _id"
        case .emptyPath: "a field path must name at least one key"
        case .tooDeep(let p): "writing at \(p) would nest deeper than \(Document.maxNestingDepth) levels"
        case .notAMap(let p): "\(p) is not a MAP (declare it MAP or use non-strict mode)"
        case .typeMismatch(let p, let t): "the value written at \(p) does not fit its declared type \(t.rawValue)"
        case .invalidNumber(let p): "numbers at \(p) must be finite (JSON has no NaN or infinity)"
        case .deltaGap(let s): "the delta starts after this replica's version for \(s): request a delta since the current version vector"
        case .malformed(let why): "malformed CRDT encoding: \(why)"
        case .decoding(let e): "CRDT decoding failed: \(e)"
        case .unsupportedVersion(let v): "unsupported CRDT encoding version \(v)"
        }
    }
}
