import DQL
import Values

/// Which collections a key may read or write.
public enum CollectionScope: Sendable, Hashable, CustomStringConvertible {
    case all
    /// Only these collections (possibly none).
    case only(Set<String>)

    public static let none = CollectionScope.only([])

    public func covers(_ collection: String) -> Bool {
        switch self {
        case .all: return true
        case .only(let set):
            // The set finds a canonically equivalent name; it must also be the same bytes, as in
            // PostgreSQL ("\u{212A}ate" is not "Kate").
            guard let i = set.firstIndex(of: collection) else { return false }
            return set[i].utf8Equals(collection)
        }
    }

    /// The first entry that cannot be a collection name (NameRules), with why, or nil.
    public var invalidName: (name: String, problem: String)? {
        guard case .only(let set) = self else { return nil }
        for name in set.sorted() { if let p = NameRules.problem(name) { return (name, p) } }
        return nil
    }

    public var isAll: Bool { self == .all }

    public var description: String {
        switch self {
        case .all: "all"
        case .only(let set): set.isEmpty ? "none" : set.sorted().joined(separator: ",")
        }
    }
}

/// What a request needs: the collections it reads and writes, and whether it needs every
/// collection (server-wide statements). Derived from the parsed statement, never from its text.
public struct AccessRequirement: Sendable, Hashable {
    public var reads: Set<String> = []
    public var writes: Set<String> = []
    public var readAll = false
    public var writeAll = false

    public init(reads: Set<String> = [], writes: Set<String> = [], readAll: Bool = false, writeAll: Bool = false) {
        self.reads = reads
        self.writes = writes
        self.readAll = readAll
        self.writeAll = writeAll
    }

    /// - SELECT reads its FROM collection.
    /// - INSERT writes its collection. UPDATE, DELETE and EVICT write theirs and also read it (their
    ///   WHERE clause and the returned ids disclose what is stored).
    /// - ALTER SYSTEM SET/RESET, CREATE INDEX and DROP INDEX change the server for every collection:
    ///   write-all. SHOW reads server-wide settings: read-all.
    /// - EXPLAIN runs nothing but shows the plan (and thus the shape of the query) for the inner
    ///   statement: it needs read access to every collection the inner statement touches.
    public init(_ statement: Statement) {
        switch statement {
        case .select(let s): reads = [s.from.name]
        case .insert(let s): writes = [s.collection.name]
        case .update(let s): reads = [s.collection.name]; writes = [s.collection.name]
        case .delete(let s), .evict(let s): reads = [s.collection.name]; writes = [s.collection.name]
        case .system(.show): readAll = true
        case .system: writeAll = true
        case .createIndex, .dropIndex: writeAll = true
        case .explain(let inner):
            let r = AccessRequirement(inner)
            reads = r.reads.union(r.writes)
            readAll = r.readAll || r.writeAll
        }
    }

    public mutating func formUnion(_ other: AccessRequirement) {
        reads.formUnion(other.reads)
        writes.formUnion(other.writes)
        readAll = readAll || other.readAll
        writeAll = writeAll || other.writeAll
    }

    /// Nil when `read`/`write` cover everything needed, else what is missing (for the 403 message),
    /// said of `holder`: the credential (`Principal.credentialName`).
    public func missing(read: CollectionScope, write: CollectionScope, holder: String = "this key") -> String? {
        if readAll && !read.isAll { return "\(holder) cannot read every collection" }
        if writeAll && !write.isAll { return "\(holder) cannot write every collection (needed for server-wide statements)" }
        if let c = reads.sorted().first(where: { !read.covers($0) }) { return "\(holder) cannot read collection \(c)" }
        if let c = writes.sorted().first(where: { !write.covers($0) }) { return "\(holder) cannot write collection \(c)" }
        return nil
    }
}

/// Why a request is not allowed. BigPeerServer's `APIError` gives each case its status and
/// `WWW-Authenticate` challenge (RFC 6750 §3).
public enum AuthError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No `Authorization` header.
    case missingCredentials
    /// A header that is not `Bearer <key>`, or a credential that is neither a BigPeer key nor a JWT.
    case malformedCredentials
    /// Well-formed but unknown, or the secret does not match.
    case invalidKey
    case expiredKey
    case revokedKey
    /// A JWT that does not verify, has expired or is not accepted here; `.keysUnavailable`: its
    /// keys cannot be loaded right now (try again later).
    case invalidToken(JWTError)
    /// An authentication webhook refused the token, or could not be asked (`AuthWebhookError`).
    case webhook(AuthWebhookError)
    /// The key is valid but its scope does not cover the request.
    case forbidden(String)
    /// The key table could not be read (the database is down).
    case unavailable
    /// OpenSSL's random generator failed (creating keys only).
    case randomUnavailable

    public var description: String {
        switch self {
        case .missingCredentials: "authentication required: send Authorization: Bearer <API key>"
        case .malformedCredentials: "the Authorization header must be Bearer followed by a BigPeer API key (bpk_...) or a JWT"
        case .invalidKey: "the API key is not valid"
        case .expiredKey: "the API key has expired"
        case .revokedKey: "the API key has been revoked"
        case .invalidToken(let why): why.description
        case .webhook(let why): why.description
        case .forbidden(let why): "not permitted: \(why)"
        case .unavailable: "credentials cannot be checked right now; retry later"
        case .randomUnavailable: "the random number generator failed"
        }
    }
}
